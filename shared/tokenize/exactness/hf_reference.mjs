// Writes Hugging Face's ids for a corpus: the reference of the exactness test.
//
//   node hf_reference.mjs NODE_MODULES TOKENIZER_JSON CORPUS.jsonl OUT.bin
//
// CORPUS.jsonl holds one JSON string per line. Document i is encoded with
// addSpecialTokens = (i % 2 == 0), by the official Node binding of
// `tokenizers` (Rust inside). OUT.bin: per document, uint32 add_special,
// uint32 n, n uint32 ids, little-endian (read by kvindex_tokenize_check).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const [nodeModules, tokenizerJson, corpusPath, outPath] = process.argv.slice(2);
const require = createRequire(path.join(nodeModules, 'index.js'));
const { Tokenizer } = require('tokenizers');

const tokenizer = Tokenizer.fromFile(tokenizerJson);
const docs = readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));

const results = new Array(docs.length);
const BATCH = 256;
for (const add of [true, false]) {
  const indices = [];
  for (let i = add ? 0 : 1; i < docs.length; i += 2) indices.push(i);
  for (let b = 0; b < indices.length; b += BATCH) {
    const slice = indices.slice(b, b + BATCH);
    const encodings = await tokenizer.encodeBatch(slice.map((i) => docs[i]), { addSpecialTokens: add });
    slice.forEach((i, k) => { results[i] = encodings[k].getIds(); });
  }
}

let total = 0;
for (const ids of results) total += 2 + ids.length;
const out = new Uint32Array(total);
let p = 0;
results.forEach((ids, i) => {
  out[p++] = i % 2 === 0 ? 1 : 0;
  out[p++] = ids.length;
  out.set(ids, p);
  p += ids.length;
});
writeFileSync(outPath, Buffer.from(out.buffer));
