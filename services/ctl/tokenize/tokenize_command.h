// `kvindex-ctl tokenize`: the ids a model's tokenizer gives a text, exactly
// as Hugging Face's Tokenizer.encode with its defaults (docs/tokenize.md).
//
//   kvindex-ctl tokenize --tokenizer DIR [--no-special-tokens] [--chat FILE | --file PATH | TEXT]
//
// DIR holds tokenizer.json (and tokenizer_config.json). Prints one JSON line
// {"ids": [...]}. --chat FILE: an OpenAI messages array, or a chat request
// object (messages, tools, add_generation_prompt, chat_template_kwargs,
// ...), rendered with the model's chat template as vLLM renders it
// (generation prompt on by default) and tokenized as vLLM does
// (chat_encoder.h; special tokens only if the request's
// add_special_tokens says so). Exit 1 when the tokenizer does not load, the
// text is not UTF-8 or the chat cannot be rendered (one line on stderr), 2
// on bad flags.
#pragma once

#include <ostream>
#include <string>

namespace kvindex::ctl {

struct TokenizeArgs {
  std::string tokenizer;  // directory with tokenizer.json
  std::string file;       // read the text from here (else `text`)
  std::string text;
  std::string chat;  // a chat request file (else text)
  bool add_special_tokens = true;
};

int RunTokenize(const TokenizeArgs& args, std::ostream& out, std::ostream& err);

// Entry point from kvindex-ctl's main: argv[0] == "tokenize".
int RunTokenizeCommand(int argc, char** argv);

}  // namespace kvindex::ctl
