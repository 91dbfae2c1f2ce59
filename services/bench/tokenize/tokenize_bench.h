// `kvindex-bench tokenize`: tokenizer throughput per model next to Hugging
// Face's tokenizers (Node binding) on the same inputs, in the same run.
//
//   kvindex-bench tokenize --tokenizer MODEL=DIR... [--text-file F] [--json]
//                          [--hf-node-modules DIR | --no-hf]
//
// Per model: load time and RSS growth; MB/s and tokens/s on one thread for
// 1 KB, 32 KB and 1 MB inputs; the time of a ~32k-token prompt; the prefix
// cache's cost per KB of new text over a 20-turn conversation. The inputs are
// --text-file (default: text from /usr/share/doc and /usr/include, 1 MB).
#pragma once

namespace kvindex::bench {

int RunTokenizeBench(int argc, char** argv);

}  // namespace kvindex::bench
