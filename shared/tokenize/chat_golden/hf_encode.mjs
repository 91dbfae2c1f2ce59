// Encodes prompts with Hugging Face's official Node binding of `tokenizers`
// (the golden ids of chat_golden_test; run by make_golden.py at dev time).
//
//   node hf_encode.mjs NODE_MODULES TOKENIZER_JSON < lines > ids
//
// Input: one JSON [text, add_special_tokens] per line; output: one JSON id
// array per line.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const [nodeModules, tokenizerJson] = process.argv.slice(2);
const require = createRequire(path.join(nodeModules, 'index.js'));
const { Tokenizer } = require('tokenizers');
const tokenizer = Tokenizer.fromFile(tokenizerJson);
const lines = readFileSync(0, 'utf8').split('\n').filter((l) => l.length > 0);
const out = [];
for (const line of lines) {
  const [text, add] = JSON.parse(line);
  const [encoding] = await tokenizer.encodeBatch([text], { addSpecialTokens: add });
  out.push(JSON.stringify(Array.from(encoding.getIds())));
}
process.stdout.write(out.join('\n') + '\n');
