// The chat-template exactness test's second opinion: renders the same chats
// as reference_render.py, with Hugging Face's JavaScript Jinja
// (@huggingface/jinja, as transformers.js uses it) instead of python3-jinja2.
//
// usage: node hf_jinja_render.mjs HF_JINJA_DIR < cases.jsonl > results.jsonl
// Each input line: {config, messages, add_generation_prompt, tools, extra}
// (exactness_test.py's cases). Each output line: {"ok": TEXT} or
// {"error": "thrown", "message": TEXT} (raise_exception's message, or the
// library's own error).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir] = process.argv.slice(2);
if (!dir) {
  process.stderr.write("usage: node hf_jinja_render.mjs HF_JINJA_DIR < cases.jsonl\n");
  process.exit(2);
}
const { Template } = await import(pathToFileURL(join(dir, "dist", "index.js")).href);

// The same variables reference_render.py passes (transformers' set).
const SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function tokenString(value) {
  return value !== null && typeof value === "object" ? value.content : value;
}

function specialTokens(config) {
  const out = {};
  for (const key of SPECIAL_TOKENS) {
    const value = tokenString(config[key]);
    if (typeof value === "string" && value) out[key] = value;
  }
  const extra = (config.additional_special_tokens || []).map(tokenString);
  if (extra.length) out.additional_special_tokens = extra;
  return out;
}

function selectTemplate(config, hasTools) {
  const template = config.chat_template;
  if (template === undefined || template === null) throw new Error("no chat_template");
  if (typeof template === "string") return template;
  const named = Object.fromEntries(template.map((entry) => [entry.name, entry.template]));
  return hasTools && "tool_use" in named ? named.tool_use : named.default;
}

const compiled = new Map();
function render(c) {
  const source = selectTemplate(c.config, c.tools !== null && c.tools !== undefined);
  if (!compiled.has(source)) compiled.set(source, new Template(source));
  return compiled.get(source).render({
    messages: c.messages,
    tools: c.tools ?? null,
    documents: null,
    add_generation_prompt: c.add_generation_prompt,
    ...specialTokens(c.config),
    ...(c.extra || {}),
  });
}

const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.length > 0);
const out = [];
for (const line of lines) {
  try {
    out.push(JSON.stringify({ ok: render(JSON.parse(line)) }));
  } catch (e) {
    out.push(JSON.stringify({ error: "thrown", message: String(e && e.message !== undefined ? e.message : e) }));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
