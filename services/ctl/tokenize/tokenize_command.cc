#include "services/ctl/tokenize/tokenize_command.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "shared/config/cli.h"
#include "shared/tokenize/chat_encoder.h"
#include "shared/tokenize/tokenizer.h"

namespace kvindex::ctl {

int RunTokenize(const TokenizeArgs& args, std::ostream& out, std::ostream& err) {
  const std::string_view prefix = "kvindex-ctl tokenize: ";
  std::string text = args.text;
  const std::string& path = args.chat.empty() ? args.file : args.chat;
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      err << prefix << "cannot read " << path << '\n';
      return 1;
    }
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  auto tokenizer = tokenize::Tokenizer::Load(args.tokenizer);
  if (!tokenizer.ok()) {
    err << prefix << tokenizer.status().message() << '\n';
    return 1;
  }
  StatusOr<std::vector<uint32_t>> ids;
  if (!args.chat.empty()) {
    StatusOr<tokenize::ChatRequest> request = tokenize::ParseChatRequest(text);
    ids = request.ok() ? tokenize::EncodeChat(**tokenizer, *request)
                       : StatusOr<std::vector<uint32_t>>(request.status());
  } else {
    ids = (*tokenizer)->Encode(text, args.add_special_tokens);
  }
  if (!ids.ok()) {
    err << prefix << ids.status().message() << '\n';
    return 1;
  }
  std::string line = "{\"ids\": [";
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) line += ", ";
    line += std::to_string((*ids)[i]);
  }
  line += "]}\n";
  out << line;
  return 0;
}

int RunTokenizeCommand(int argc, char** argv) {
  TokenizeArgs args;
  bool no_special = false;
  CLI::App app{
      "Print the token ids of a text as Hugging Face's tokenizers gives them (encode with its "
      "defaults): one JSON line {\"ids\": [...]}.",
      "kvindex-ctl tokenize"};
  app.add_option("--tokenizer", args.tokenizer, "Directory with tokenizer.json")->required();
  auto* file = app.add_option("--file", args.file, "Read the text from this file");
  auto* chat = app.add_option("--chat", args.chat,
                              "A chat (OpenAI messages JSON, or a chat request object) to render "
                              "with the model's chat template and tokenize as vLLM does")
                   ->excludes(file);
  app.add_flag("--no-special-tokens", no_special,
               "Do not add the post-processor's tokens (BOS); add_special_tokens=False");
  app.add_option("text", args.text, "The text (instead of --file)")->excludes(file)->excludes(chat);
  if (std::optional<int> exit_code = config::Parse(app, argc, argv)) return *exit_code;
  args.add_special_tokens = !no_special;
  return RunTokenize(args, std::cout, std::cerr);
}

}  // namespace kvindex::ctl
