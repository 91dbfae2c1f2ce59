"""Reference chat-template rendering: Debian's python3-jinja2 in the
environment transformers' apply_chat_template builds (written from its
documented behaviour, not copied): an ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension; a `tojson` filter
that is json.dumps(x, ensure_ascii=False, indent=None, separators=None,
sort_keys=False) with those keyword arguments exposed; the globals
raise_exception(message) (raises TemplateError) and strftime_now(format); a
{% generation %} block that renders its body; and the render variables
messages, tools, documents, add_generation_prompt, the tokenizer's special
tokens as strings, then the caller's extra keyword arguments."""

import functools
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class RaisedByTemplate(Exception):
    """raise_exception() was called; the message is the template's."""


class _Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise RaisedByTemplate(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=None)
def compiled(source):
    return environment().from_string(source)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _token_string(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def special_tokens(config):
    """The tokenizer's special_tokens_map: the set tokens, as strings."""
    out = {}
    for key in SPECIAL_TOKENS:
        value = _token_string(config.get(key))
        if isinstance(value, str) and value:
            out[key] = value
    extra = [_token_string(t) for t in config.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


def select_template(config, has_tools):
    template = config.get("chat_template")
    if template is None:
        raise LookupError("no chat_template")
    if isinstance(template, str):
        return template
    named = {entry["name"]: entry["template"] for entry in template}
    if has_tools and "tool_use" in named:
        return named["tool_use"]
    return named["default"]


def render_chat(config, messages, add_generation_prompt, tools=None, extra=None):
    source = select_template(config, tools is not None)
    variables = dict(special_tokens(config))
    variables.update(extra or {})
    return compiled(source).render(
        messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **variables
    )


# A model of @huggingface/jinja's known departures from Jinja2, used only to
# explain where the exactness test's second opinion disagrees with Jinja2
# (vLLM renders with Jinja2, so Jinja2 stays the reference). Each departure
# below was read off the library's runtime (0.5.13), not guessed:
#   - `trim`, `strip`, `lstrip`, `rstrip` use JavaScript's trim: its
#     whitespace set (no U+001C-U+001F or U+0085, but U+FEFF), and the
#     methods ignore a `chars` argument;
#   - `trim` of a non-string (None) is an error, not "None";
#   - numbers are JavaScript numbers: 2.0 arrives as 2.
JS_WHITESPACE = "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000\ufeff"


def _js_trim(value, which="strip"):
    if which == "lstrip":
        return value.lstrip(JS_WHITESPACE)
    if which == "rstrip":
        return value.rstrip(JS_WHITESPACE)
    return value.strip(JS_WHITESPACE)


def _js_trim_filter(value, chars=None):
    if not isinstance(value, str):
        raise TypeError("Cannot apply filter \"trim\" to %s" % type(value).__name__)
    return _js_trim(value)


class _JsSemanticsEnvironment(ImmutableSandboxedEnvironment):
    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja2's signature)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str) and name in ("strip", "lstrip", "rstrip"):
            return _js_trim(owner, name)
        return super().call(__context, __obj, *args, **kwargs)


def _js_numbers(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_js_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _js_numbers(v) for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def compiled_js_semantics(source):
    env = _JsSemanticsEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.filters["trim"] = _js_trim_filter
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def render_chat_js_semantics(config, messages, add_generation_prompt, tools=None, extra=None):
    """render_chat with @huggingface/jinja's departures (above) modelled."""
    source = select_template(config, tools is not None)
    variables = dict(special_tokens(config))
    variables.update(_js_numbers(extra or {}))
    return compiled_js_semantics(source).render(
        messages=_js_numbers(messages), tools=_js_numbers(tools), documents=None,
        add_generation_prompt=add_generation_prompt, **variables
    )
