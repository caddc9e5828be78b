#!/usr/bin/env node
// ONNX Runtime reference runner for infd tests and benches.
//
// Usage:
//   node tools/ort_ref.js MODEL.onnx [--input NAME=FILE.npy ...] [--output-dir DIR]
//        [--threads N] [--opt all|extended|basic|disabled] [--bench-iterations N]
//        [--warmup N] [--seed N] [--dim SYMBOL=N ...] [--shape NAME=D0,D1,... ...]
//
// * onnxruntime-node is loaded from $INFD_CACHE/npm/node_modules (INFD_CACHE
//   defaults to <repo>/.cache; populate it with scripts/fetch_npm.sh).
// * Inputs are NumPy .npy files (format v1/v2/v3, little-endian, C order;
//   float32 float16 float64 int8 uint8 int16 uint16 int32 uint32 int64 uint64
//   bool). If the file's dtype differs from the model's input type, numeric
//   values are converted (with a note on stderr).
//   `--input FILE.npy` (no NAME=) is accepted when the model has one input.
// * An input that is not given gets a deterministic random tensor (seeded by
//   --seed, default 0, and the input's position): floats ~ N(0,1), uint8 in
//   [0,255], other integers in [0,9], bool 0/1. Symbolic dims are 1 unless
//   set with --dim SYMBOL=N, or the whole shape is given with --shape. The
//   generated tensor is saved as DIR/input_<sanitized name>.npy.
// * Each output is written to DIR/<sanitized name>.npy (sanitized: characters
//   outside [A-Za-z0-9._-] become '_', e.g. "Identity:0" -> "Identity_0") and
//   one JSON line per output is printed on stdout:
//     {"name":..., "shape":[...], "dtype":"float32", "file":...}
// * --bench-iterations N: after --warmup runs (default 3) time N runs and
//   print one JSON line {"p50_ms","p90_ms","p99_ms","mean_ms","min_ms",
//   "throughput_per_s" (runs per second), "iterations", "threads", "opt"}.
// Exit status: 0 ok, 1 runtime error (ORT_REF_DEBUG=1 prints the stack), 2 usage error.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

// ---------------------------------------------------------------- npy I/O --

// numpy descr (without byte-order char) <-> onnxruntime type
const NPY_TO_ORT = {
  f4: 'float32', f2: 'float16', f8: 'float64',
  i1: 'int8', u1: 'uint8', i2: 'int16', u2: 'uint16',
  i4: 'int32', u4: 'uint32', i8: 'int64', u8: 'uint64', b1: 'bool',
};
const ORT_TO_NPY = {};
for (const [k, v] of Object.entries(NPY_TO_ORT)) ORT_TO_NPY[v] = k;

// ORT type -> TypedArray constructor holding its data (float16 as raw bits)
const ARRAY_OF = {
  float32: Float32Array, float16: Uint16Array, float64: Float64Array,
  int8: Int8Array, uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array,
  int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array,
  uint64: BigUint64Array, bool: Uint8Array,
};

function prod(shape) { return shape.reduce((a, b) => a * b, 1); }

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const magic = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]); // \x93NUMPY
  if (buf.length < 10 || !buf.subarray(0, 6).equals(magic)) {
    throw new Error(`${file}: not a .npy file`);
  }
  const major = buf[6];
  let hlen, hstart;
  if (major === 1) { hlen = buf.readUInt16LE(8); hstart = 10; }
  else if (major === 2 || major === 3) { hlen = buf.readUInt32LE(8); hstart = 12; }
  else throw new Error(`${file}: unsupported .npy version ${major}`);
  const header = buf.subarray(hstart, hstart + hlen).toString(major === 3 ? 'utf8' : 'latin1');
  const descrM = header.match(/'descr'\s*:\s*'([^']*)'/);
  const fortranM = header.match(/'fortran_order'\s*:\s*(True|False)/);
  const shapeM = header.match(/'shape'\s*:\s*\(([^)]*)\)/);
  if (!descrM || !fortranM || !shapeM) throw new Error(`${file}: cannot parse header ${header.trim()}`);
  const descr = descrM[1];
  const order = descr[0];
  const code = descr.slice(1);
  const type = NPY_TO_ORT[code];
  if (!type || !'<|='.includes(order) || (order === '|' && !['i1', 'u1', 'b1'].includes(code))) {
    throw new Error(`${file}: unsupported dtype '${descr}' (need little-endian ${Object.keys(NPY_TO_ORT).join('/')})`);
  }
  if (fortranM[1] === 'True') throw new Error(`${file}: fortran_order arrays are not supported`);
  const shape = shapeM[1].split(',').map((s) => s.trim()).filter((s) => s.length).map(Number);
  const n = prod(shape);
  const Arr = ARRAY_OF[type];
  const off = hstart + hlen;
  const nbytes = n * Arr.BYTES_PER_ELEMENT;
  if (buf.length < off + nbytes) throw new Error(`${file}: truncated (${buf.length - off} < ${nbytes} data bytes)`);
  // copy into a fresh (aligned) ArrayBuffer
  const ab = buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + off + nbytes);
  return { type, shape, data: new Arr(ab) };
}

function writeNpy(file, type, shape, data) {
  const code = ORT_TO_NPY[type];
  if (!code) throw new Error(`cannot write ${type} tensor to .npy`);
  const descr = (['i1', 'u1', 'b1'].includes(code) ? '|' : '<') + code;
  const shp = shape.length === 0 ? '()' : shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shp}, }`;
  let pre = 10;
  let major = 1;
  if (header.length + 1 + pre > 65535) { pre = 12; major = 2; }
  const pad = (64 - ((pre + header.length + 1) % 64)) % 64;
  header = header + ' '.repeat(pad) + '\n';
  const hb = Buffer.alloc(pre);
  Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0]).copy(hb);
  if (major === 1) hb.writeUInt16LE(header.length, 8); else hb.writeUInt32LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([hb, Buffer.from(header, 'latin1'), body]));
}

// ------------------------------------------------------ float16 & casting --

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

function f32ToF16(val) { // round-to-nearest-even
  f32buf[0] = val;
  const x = u32buf[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) { // subnormal or zero
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++; // may carry into exp: ok
  return h;
}

function f16ToF32(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

// Convert a tensor's data array between ORT types (numeric only).
function castData(data, from, to) {
  if (from === to) return data;
  const n = data.length;
  const toNumber = from === 'float16' ? (i) => f16ToF32(data[i]) : (i) => Number(data[i]);
  const out = new ARRAY_OF[to](n);
  for (let i = 0; i < n; i++) {
    const v = toNumber(i);
    if (to === 'float16') out[i] = f32ToF16(v);
    else if (to === 'int64' || to === 'uint64') out[i] = BigInt(Math.trunc(Number.isFinite(v) ? v : 0));
    else if (to === 'bool') out[i] = v ? 1 : 0;
    else out[i] = v;
  }
  return out;
}

// ----------------------------------------------------------- random input --

function mulberry32(seed) {
  let a = seed >>> 0;
  return function rand() {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomTensorData(type, n, seed) {
  const rand = mulberry32(seed);
  const Arr = ARRAY_OF[type];
  if (!Arr) throw new Error(`cannot generate random data of type ${type}`);
  const out = new Arr(n);
  if (type === 'float32' || type === 'float64' || type === 'float16') {
    for (let i = 0; i < n; i += 2) { // Box-Muller
      const u1 = 1 - rand();
      const u2 = rand();
      const r = Math.sqrt(-2 * Math.log(u1));
      const z0 = r * Math.cos(2 * Math.PI * u2);
      const z1 = r * Math.sin(2 * Math.PI * u2);
      out[i] = type === 'float16' ? f32ToF16(z0) : z0;
      if (i + 1 < n) out[i + 1] = type === 'float16' ? f32ToF16(z1) : z1;
    }
  } else if (type === 'bool') {
    for (let i = 0; i < n; i++) out[i] = rand() < 0.5 ? 0 : 1;
  } else if (type === 'uint8') {
    for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 256);
  } else if (type === 'int64' || type === 'uint64') {
    for (let i = 0; i < n; i++) out[i] = BigInt(Math.floor(rand() * 10));
  } else {
    for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 10);
  }
  return out;
}

// ------------------------------------------------------------------ CLI ----

function usage(msg) {
  if (msg) process.stderr.write(`ort_ref: ${msg}\n`);
  process.stderr.write(
    'usage: node tools/ort_ref.js MODEL.onnx [--input NAME=FILE.npy ...] [--output-dir DIR]\n' +
    '       [--threads N] [--opt all|extended|basic|disabled] [--bench-iterations N] [--warmup N]\n' +
    '       [--seed N] [--dim SYMBOL=N ...] [--shape NAME=D0,D1,... ...]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = {
    model: null, inputs: [], outputDir: null, threads: 0, opt: 'all',
    benchIterations: 0, warmup: 3, seed: 0, dims: {}, shapes: {},
  };
  const intArg = (name, v, min) => {
    if (v === undefined || !/^\d+$/.test(v) || Number(v) < min) usage(`${name} needs an integer >= ${min}`);
    return Number(v);
  };
  const kv = (name, v) => {
    const i = v === undefined ? -1 : v.indexOf('=');
    if (i <= 0) usage(`${name} expects KEY=VALUE, got ${v}`);
    return [v.slice(0, i), v.slice(i + 1)];
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i];
    let val;
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const next = () => (val !== undefined ? val : argv[++i]);
    if (eq > 0) { val = arg.slice(eq + 1); arg = arg.slice(0, eq); }
    switch (arg) {
      case '--input': { const v = next(); if (v === undefined) usage('--input needs a value'); a.inputs.push(v); break; }
      case '--output-dir': a.outputDir = next(); if (!a.outputDir) usage('--output-dir needs a value'); break;
      case '--threads': a.threads = intArg(arg, next(), 0); break;
      case '--opt': a.opt = next(); break;
      case '--bench-iterations': a.benchIterations = intArg(arg, next(), 0); break;
      case '--warmup': a.warmup = intArg(arg, next(), 0); break;
      case '--seed': a.seed = intArg(arg, next(), 0); break;
      case '--dim': { const [k, v] = kv(arg, next()); a.dims[k] = intArg(arg, v, 0); break; }
      case '--shape': {
        const [k, v] = kv(arg, next());
        a.shapes[k] = v.length ? v.split(',').map((d) => intArg(arg, d.trim(), 0)) : [];
        break;
      }
      case '-h': case '--help': usage();
      // falls through (usage exits)
      default:
        if (arg.startsWith('-')) usage(`unknown option ${arg}`);
        if (a.model) usage(`unexpected argument ${arg}`);
        a.model = arg;
    }
  }
  if (!a.model) usage('missing MODEL.onnx');
  if (!['all', 'extended', 'basic', 'disabled'].includes(a.opt)) usage(`bad --opt ${a.opt}`);
  return a;
}

function loadOrt() {
  const repoRoot = path.resolve(__dirname, '..');
  const cacheDir = process.env.INFD_CACHE || path.join(repoRoot, '.cache');
  const modDir = path.join(cacheDir, 'npm/node_modules/onnxruntime-node');
  if (!fs.existsSync(modDir)) {
    process.stderr.write(`ort_ref: ${modDir} not found; run scripts/fetch_npm.sh first\n`);
    process.exit(1);
  }
  return require(modDir);
}

function sanitize(name) {
  const s = name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '_');
  return s.length ? s : '_';
}

function percentile(sorted, p) { // nearest-rank
  const k = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[k];
}

const r3 = (x) => Math.round(x * 1000) / 1000;

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (os.endianness() !== 'LE') throw new Error('big-endian hosts are not supported');
  const ort = loadOrt();

  const opts = {
    graphOptimizationLevel: args.opt,
    executionProviders: ['cpu'],
    executionMode: 'sequential',
    interOpNumThreads: 1,
    logSeverityLevel: process.env.ORT_REF_DEBUG ? 2 : 3, // hide ORT warnings unless debugging
  };
  if (args.threads > 0) opts.intraOpNumThreads = args.threads;
  const tCreate = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(args.model, opts);
  const sessionMs = Number(process.hrtime.bigint() - tCreate) / 1e6;

  const meta = {};
  for (const m of session.inputMetadata) meta[m.name] = m;
  const inputNames = session.inputNames;

  // explicit inputs
  const given = {};
  for (const spec of args.inputs) {
    const eq = spec.indexOf('=');
    let name;
    let file;
    if (eq > 0 && meta[spec.slice(0, eq)]) { name = spec.slice(0, eq); file = spec.slice(eq + 1); }
    else if (eq < 0 && inputNames.length === 1) { name = inputNames[0]; file = spec; }
    else {
      throw new Error(`--input ${spec}: unknown input name (model inputs: ${JSON.stringify(inputNames)})`);
    }
    given[name] = file;
  }
  for (const k of [...Object.keys(args.shapes)]) {
    if (!meta[k]) throw new Error(`--shape ${k}: unknown input (model inputs: ${JSON.stringify(inputNames)})`);
  }

  if (args.outputDir) fs.mkdirSync(args.outputDir, { recursive: true });

  const feeds = {};
  let batch = null;
  for (let idx = 0; idx < inputNames.length; idx++) {
    const name = inputNames[idx];
    const m = meta[name];
    if (!m || m.isTensor === false) throw new Error(`input ${name} is not a tensor; not supported`);
    const type = m.type;
    let shape;
    let data;
    if (given[name] !== undefined) {
      const t = readNpy(given[name]);
      shape = t.shape;
      data = t.data;
      if (t.type !== type) {
        process.stderr.write(`ort_ref: note: converting ${given[name]} from ${t.type} to ${type} for input ${name}\n`);
        data = castData(data, t.type, type);
      }
    } else {
      if (args.shapes[name]) shape = args.shapes[name];
      else {
        if (!Array.isArray(m.shape)) throw new Error(`input ${name}: unknown shape; give --shape ${name}=...`);
        shape = m.shape.map((d) => {
          if (typeof d === 'number' && d >= 0) return d;
          if (typeof d === 'string' && args.dims[d] !== undefined) return args.dims[d];
          return 1;
        });
      }
      data = randomTensorData(type, prod(shape), (args.seed * 1000003 + idx * 7919 + 1) >>> 0);
      if (args.outputDir) {
        writeNpy(path.join(args.outputDir, `input_${sanitize(name)}.npy`), type, shape, data);
      }
    }
    if (batch === null && shape.length > 0) batch = shape[0];
    feeds[name] = new ort.Tensor(type, data, shape);
  }

  const results = await session.run(feeds);

  const used = new Set();
  for (const name of session.outputNames) {
    const t = results[name];
    if (!t || typeof t.dims === 'undefined') {
      process.stderr.write(`ort_ref: warning: output ${name} is not a tensor; skipped\n`);
      continue;
    }
    const rec = { name, shape: Array.from(t.dims), dtype: t.type };
    if (args.outputDir) {
      let base = sanitize(name);
      let k = 1;
      while (used.has(base)) base = `${sanitize(name)}_${k++}`;
      used.add(base);
      const file = path.join(args.outputDir, `${base}.npy`);
      writeNpy(file, t.type, rec.shape, t.data);
      rec.file = file;
    }
    process.stdout.write(JSON.stringify(rec) + '\n');
  }

  if (args.benchIterations > 0) {
    for (let i = 0; i < args.warmup; i++) await session.run(feeds);
    const times = [];
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < args.benchIterations; i++) {
      const s = process.hrtime.bigint();
      await session.run(feeds);
      times.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
    const total = Number(process.hrtime.bigint() - t0) / 1e9;
    const sorted = [...times].sort((x, y) => x - y);
    process.stdout.write(JSON.stringify({
      p50_ms: r3(percentile(sorted, 50)),
      p90_ms: r3(percentile(sorted, 90)),
      p99_ms: r3(percentile(sorted, 99)),
      mean_ms: r3(times.reduce((x, y) => x + y, 0) / times.length),
      min_ms: r3(sorted[0]),
      throughput_per_s: r3(args.benchIterations / total),
      iterations: args.benchIterations,
      session_ms: r3(sessionMs),
      batch,
      threads: args.threads,
      opt: args.opt,
    }) + '\n');
  }
  if (typeof session.release === 'function') await session.release();
}

main().catch((e) => {
  const msg = process.env.ORT_REF_DEBUG && e && e.stack ? e.stack : (e && e.message) || String(e);
  process.stderr.write(`ort_ref: error: ${msg}\n`);
  process.exit(1);
});
