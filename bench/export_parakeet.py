#!/usr/bin/env python3
"""A 0.6B Parakeet-TDT model directory in the onnx-asr layout, with random
weights, for serving benchmarks on the GPU machine (issue #21):

- encoder-model.onnx (+ external data): transformers' ParakeetEncoder
  (ParakeetEncoderConfig(num_mel_bins=128): 24 FastConformer layers,
  d_model 1024), seeded, exported as bench/asr_gpu.py does;
- decoder_joint-model.onnx: a TDT predictor and joint of Parakeet-TDT
  0.6B's dimensions (embedding of 8192 + 1, a 2-layer LSTM of 640, encoder
  and predictor projections to 640, ReLU, a joint of 8192 + 1 + 5 logits),
  scripts/gen_asr_models.py's DecoderJoint at that size, exported with the
  onnx-asr names;
- vocab.txt (8192 made-up pieces and <blk>), config.json.

The text it gives is noise; the point is the cost of every step at the
real sizes. Run there: python3 bench/export_parakeet.py --out /tmp/parakeet
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

D_MODEL, PRED, VOCAB = 1024, 640, 8192


def modules():
    """The encoder (asr_gpu.build_encoder's wrapper) and the DecoderJoint,
    seeded: the weights main() exports, for PyTorch runs on the same ones
    (bench/asr_offline.py)."""
    import torch

    import asr_gpu
    import gen_asr_models as g

    enc = asr_gpu.build_encoder()
    _, DecoderJoint = g.build_modules(d_model=D_MODEL, n_layers=1, n_heads=8, pred=PRED,
                                      vocab=VOCAB)
    torch.manual_seed(g.SEED)
    return enc, DecoderJoint().eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import asr_gpu
    import gen_asr_models as g

    os.makedirs(a.out, exist_ok=True)
    enc, dec = modules()
    asr_gpu.export(enc, os.path.join(a.out, "encoder-model.onnx"))
    g.export_decoder_joint(dec, os.path.join(a.out, "decoder_joint-model.onnx"), D_MODEL, PRED,
                           VOCAB, dynamo=False)
    with open(os.path.join(a.out, "vocab.txt"), "w", encoding="utf-8") as f:
        for i in range(VOCAB):
            f.write(("\u2581" if i % 3 == 0 else "") + f"p{i} {i}\n")
        f.write(f"<blk> {VOCAB}\n")
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump({"model_type": "nemo-conformer-tdt", "features_size": 128,
                   "subsampling_factor": 8, "max_tokens_per_step": 10}, f, indent=1)
    print(f"export_parakeet: wrote {a.out}")


if __name__ == "__main__":
    main()
