"""vLLM's chat preprocessing, restated in Python from vLLM's documented
behaviour (vllm/entrypoints/chat_utils.py: content-format detection,
parse_chat_messages, _postprocess_messages; serving_chat: tools through
pydantic's model_dump) for generating the golden ids of chat_golden_test.
Only text prompts: a multimodal part raises Unsupported. Independent of the
C++ code it checks (shared/tokenize/chat_messages.cc)."""

import json

import jinja2
import jinja2.nodes as jn


class Unsupported(Exception):
    pass


# ---- content format ("auto") ------------------------------------------------

def _is_var(node, name):
    return isinstance(node, jn.Name) and node.ctx == "load" and node.name == name


def _is_attr(node, name, key):
    if isinstance(node, jn.Getitem):
        return _is_var(node.node, name) and isinstance(node.arg, jn.Const) and node.arg.value == key
    if isinstance(node, jn.Getattr):
        return _is_var(node.node, name) and node.attr == key
    return False


def _is_var_or_elems(node, name, key=None):
    if isinstance(node, jn.Filter):
        return node.node is not None and _is_var_or_elems(node.node, name, key)
    if isinstance(node, jn.Test):
        return _is_var_or_elems(node.node, name, key)
    if isinstance(node, jn.Getitem) and isinstance(node.arg, jn.Slice):
        return _is_var_or_elems(node.node, name, key)
    return _is_attr(node, name, key) if key else _is_var(node, name)


def content_format(source):
    """'openai' when the template loops over a message's content, else 'string'."""
    try:
        ast = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(source)
    except Exception:
        return "string"
    lists, pending = ["messages"], ["messages"]
    while pending:
        name = pending.pop(0)
        for assign in ast.find_all(jn.Assign):
            if _is_var_or_elems(assign.node, name):
                if not isinstance(assign.target, jn.Name):
                    return "string"
                if assign.target.name not in lists:
                    lists.append(assign.target.name)
                    pending.append(assign.target.name)
    messages = []
    for loop in ast.find_all(jn.For):
        if any(_is_var_or_elems(loop.iter, v) for v in lists):
            if not isinstance(loop.target, jn.Name):
                return "string"
            messages.append(loop.target.name)
    for loop in ast.find_all(jn.For):
        if any(_is_var_or_elems(loop.iter, m, "content") for m in messages):
            return "openai" if isinstance(loop.target, jn.Name) else "string"
    return "string"


# ---- messages -----------------------------------------------------------------

MEDIA = ("image_url", "image_pil", "image_embeds", "audio_embeds", "prompt_embeds", "audio_url",
         "input_audio", "video_url", "input_image")


def _part(part, wrap):
    if isinstance(part, str):
        return {"type": "text", "text": part} if wrap else part
    kind = part.get("type")
    if kind is None or part.get("uuid") is not None:
        if any(k in part for k in MEDIA):
            raise Unsupported("multimodal")
        if "tool_reference" not in part:
            raise ValueError("Missing 'type' field in multimodal part.")
        kind = "tool_reference"
    value = {"text": part.get("text"), "input_text": part.get("text"), "output_text": part.get("text"),
             "refusal": part.get("refusal"), "thinking": part.get("thinking"),
             "tool_reference": part.get("name")}
    if kind in MEDIA:
        raise Unsupported("multimodal")
    if kind not in value:
        raise ValueError("unsupported part type")
    if kind in ("text", "refusal") and value[kind] is None:
        return None
    if kind == "tool_reference":
        return {"type": "tool_reference", "name": value[kind]} if wrap else value[kind]
    return {"type": "text", "text": value[kind]} if wrap else value[kind]


def preprocess(messages, fmt):
    wrap = fmt == "openai"
    out = []
    for message in messages:
        role = message["role"]
        content = message.get("content")
        parts = [] if content is None else ([{"type": "text", "text": content}] if isinstance(content, str) else content)
        items = [p for p in (_part(p, wrap) for p in parts) if p]
        result = {"role": role, "content": items if wrap else "\n".join(items)}
        if role == "assistant":
            if message.get("tool_calls") is not None:
                result["tool_calls"] = json.loads(json.dumps(list(message["tool_calls"])))
            if message.get("reasoning") is not None:
                result["reasoning"] = message["reasoning"]
                result["reasoning_content"] = message["reasoning"]
        elif role == "tool":
            if "tool_call_id" in message:
                result["tool_call_id"] = message["tool_call_id"]
            c = result["content"]
            if isinstance(c, list) and not any(isinstance(i, dict) and i.get("type") != "text" for i in c):
                texts = [i.get("text", "") for i in c if isinstance(i, dict) and i.get("type") == "text"]
                result["content"] = "\n".join(texts) if texts else ""
        if isinstance(message.get("name"), str):
            result["name"] = message["name"]
        if isinstance(message.get("task"), str):
            result["task"] = message["task"]
        if role == "developer":
            result["tools"] = message.get("tools")
        out.append(result)
    for message in out:
        calls = message.get("tool_calls")
        if message["role"] != "assistant" or not isinstance(calls, list):
            continue
        if not calls:
            del message["tool_calls"]
            continue
        for call in calls:
            args = call["function"].get("arguments")
            if isinstance(args, str):
                try:
                    call["function"]["arguments"] = json.loads(args)
                except json.JSONDecodeError:
                    call["function"]["arguments"] = {}
            elif not isinstance(args, (dict, list)):
                call["function"]["arguments"] = {}
    return out


def tools_dump(tools):
    """pydantic model_dump of vLLM's ChatCompletionToolsParam (extra fields allowed)."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        fn = tool["function"]
        function = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
        function.update({k: v for k, v in fn.items() if k not in function})
        dumped = {"type": "function", "function": function}
        dumped.update({k: v for k, v in tool.items() if k not in ("type", "function")})
        out.append(dumped)
    return out
