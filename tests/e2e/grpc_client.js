#!/usr/bin/env node
// grpc_client.js - drives infd's gRPC frontend from Node's @grpc/grpc-js,
// with @grpc/proto-loader reading proto/grpc_service.proto and
// proto/health.proto at run time (as a Node client of Triton or KServe
// does), for tests/e2e/test_grpc_node.py.
//
//   node tests/e2e/grpc_client.js HOST:PORT
//
// Runs a fixed scenario against a server with the models of
// test_grpc_node.py (add_sub, add_sub_slow, identity_int32) and prints one
// JSON object with what each call returned; the Python side checks it.
// Packages come from $INFD_CACHE/npm (scripts/fetch_npm.sh).
'use strict';

const fs = require('fs');
const path = require('path');

const repoRoot = path.resolve(__dirname, '../..');
const cacheDir = process.env.INFD_CACHE || path.join(repoRoot, '.cache');
const modules = path.join(cacheDir, 'npm/node_modules');
for (const m of ['@grpc/grpc-js', '@grpc/proto-loader']) {
  if (!fs.existsSync(path.join(modules, m))) {
    process.stderr.write(`grpc_client: ${m} not in ${modules}; run scripts/fetch_npm.sh\n`);
    process.exit(3);
  }
}
const grpc = require(path.join(modules, '@grpc/grpc-js'));
const protoLoader = require(path.join(modules, '@grpc/proto-loader'));

const target = process.argv[2];
if (!target) {
  process.stderr.write('usage: grpc_client.js HOST:PORT\n');
  process.exit(2);
}

const loadOpts = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
                   includeDirs: [path.join(repoRoot, 'proto')] };
const inference = grpc.loadPackageDefinition(
  protoLoader.loadSync(['grpc_service.proto', 'health.proto'], loadOpts));
const opts = { 'grpc.max_receive_message_length': 64 << 20,
               'grpc.max_send_message_length': 64 << 20 };
const client = new inference.inference.GRPCInferenceService(
  target, grpc.credentials.createInsecure(), opts);
const health = new inference.grpc.health.v1.Health(target, grpc.credentials.createInsecure());

// A unary call as a promise of {ok, value} or {ok: false, code, details}.
function call(stub, method, req, deadlineMs = 30000) {
  return new Promise((resolve) => {
    stub[method](req, { deadline: Date.now() + deadlineMs }, (err, value) => {
      if (err) resolve({ ok: false, code: err.code, details: err.details });
      else resolve({ ok: true, value });
    });
  });
}

function f32(values) {
  return Buffer.from(new Float32Array(values).buffer);
}

function decode(resp) {
  // {name: [numbers]} from raw_output_contents, by each output's datatype.
  const out = {};
  resp.outputs.forEach((o, i) => {
    const b = resp.raw_output_contents[i];
    const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
    const arr = o.datatype === 'INT32' ? new Int32Array(ab) : new Float32Array(ab);
    out[o.name] = { datatype: o.datatype, shape: o.shape.map(Number), data: Array.from(arr) };
  });
  return out;
}

function addSubRequest(model, id, a, b, rows = 1) {
  return {
    model_name: model, id,
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [rows, 16] },
             { name: 'INPUT1', datatype: 'FP32', shape: [rows, 16] }],
    raw_input_contents: [f32(a), f32(b)],
  };
}

function range(n, k) {
  return Array.from({ length: n }, (_, i) => i * k);
}

async function main() {
  const r = {};
  r.live = await call(client, 'ServerLive', {});
  r.ready = await call(client, 'ServerReady', {});
  r.server_metadata = await call(client, 'ServerMetadata', {});
  r.model_metadata = await call(client, 'ModelMetadata', { name: 'add_sub' });
  r.model_ready = await call(client, 'ModelReady', { name: 'add_sub' });
  r.config = await call(client, 'ModelConfig', { name: 'add_sub' });
  r.index = await call(client, 'RepositoryIndex', {});
  r.health = await call(health, 'Check', { service: '' });

  const a = range(16, 1), b = range(16, 0.5);
  const inf = await call(client, 'ModelInfer', addSubRequest('add_sub', 'n1', a, b));
  r.infer = inf.ok ? { id: inf.value.id, model_version: inf.value.model_version,
                       outputs: decode(inf.value) } : inf;
  // Typed contents in.
  const typed = await call(client, 'ModelInfer', {
    model_name: 'identity_int32', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 4],
                                             contents: { int_contents: [-7, 0, 7, 2147483647] } }],
  });
  r.typed = typed.ok ? decode(typed.value) : typed;
  r.unknown_model = await call(client, 'ModelInfer', addSubRequest('nope', '', a, b));
  r.bad_shape = await call(client, 'ModelInfer', {
    model_name: 'add_sub',
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16] },
             { name: 'INPUT1', datatype: 'FP32', shape: [1, 3] }],
    raw_input_contents: [f32(a), f32([1, 2, 3])],
  });
  r.deadline = await call(client, 'ModelInfer', addSubRequest('add_sub_slow', '', a, b), 200);
  r.stats = await call(client, 'ModelStatistics', { name: 'add_sub' });

  // 100 interleaved requests on one stream (three models, batch 1..3,
  // one in ten an error), answered in completion order, matched by id.
  r.stream = await new Promise((resolve) => {
    const got = {};
    const s = client.ModelStreamInfer();
    s.on('data', (m) => {
      const resp = m.infer_response;
      got[resp.id] = m.error_message ? { error: m.error_message } : decode(resp);
    });
    s.on('error', (e) => resolve({ stream_error: e.details }));
    s.on('end', () => resolve(got));
    for (let i = 0; i < 100; i++) {
      const rows = 1 + (i % 3);
      const x = range(16 * rows, 1).map((v) => v + i);
      if (i % 10 === 9) {
        s.write(addSubRequest('nope', `s${i}`, x, x, rows));
      } else if (i % 2 === 0) {
        s.write(addSubRequest(i % 4 === 0 ? 'add_sub' : 'add_sub_slow', `s${i}`, x, x, rows));
      } else {
        s.write({ model_name: 'identity_int32', id: `s${i}`,
                  inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [rows, 4] }],
                  raw_input_contents: [Buffer.from(new Int32Array(range(4 * rows, i)).buffer)] });
      }
    }
    s.end();
  });
  process.stdout.write(JSON.stringify(r));
  client.close();
  health.close();
}

main().catch((e) => {
  process.stderr.write(`grpc_client: ${e.stack || e}\n`);
  process.exit(1);
});
