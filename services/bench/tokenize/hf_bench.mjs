// The baseline of `kvindex-bench tokenize`: Hugging Face tokenizers through
// its official Node binding, one encode at a time (single call on a large
// input: the binding's call cost is negligible next to the work).
//
//   node hf_bench.mjs NODE_MODULES TOKENIZER_JSON INPUT... -> one JSON line
//
// Per input file: bytes, tokens, seconds per encode (best of a timed loop of
// at least 0.3 s), MB/s; plus load_ms and the process RSS after loading.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [nodeModules, tokenizerJson, ...inputs] = process.argv.slice(2);
const require = createRequire(path.join(nodeModules, 'index.js'));
const { Tokenizer } = require('tokenizers');

const rss0 = process.memoryUsage().rss;
let t0 = process.hrtime.bigint();
const tokenizer = Tokenizer.fromFile(tokenizerJson);
const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
const rss = process.memoryUsage().rss - rss0;

const results = [];
for (const file of inputs) {
  const text = readFileSync(file, 'utf8');
  const bytes = Buffer.byteLength(text);
  let tokens = (await tokenizer.encode(text)).getIds().length;  // warm up
  let runs = 0;
  t0 = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < 0.3 || runs < 3) {
    await tokenizer.encode(text);
    runs++;
    elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  }
  const seconds = elapsed / runs;
  results.push({ bytes, tokens, seconds, mb_per_s: bytes / seconds / 1e6, tokens_per_s: tokens / seconds });
}
console.log(JSON.stringify({ load_ms: loadMs, rss_bytes: rss, inputs: results }));
