// LogSubject: who a placement-log message may speak for, read from the NATS
// subject it was published on (shared/nats/subjects.h):
//   <prefix>.<model token>.<node token>  -> kEvents, node
//   <prefix>._agent.<node token>         -> kAgent, node
//   <prefix>._expire.<node token>        -> kExpire, node (routers' decisions)
// The subject is the one thing about a message that NATS permissions can
// vouch for (docs/operations.md, "Least privilege"): an agent's credentials
// may publish only on its own node's subjects, so the node in the subject is
// the sender, whatever the payload says.
//
//   LogSubject origin = ParseLogSubject(message.subject);
//   if (origin.kind == LogSubject::kMalformed) refuse;
//   if (origin.kind != LogSubject::kExpire && message.header.agent != origin.node) refuse;
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace kvindex::consume {

struct LogSubject {
  enum Kind {
    kTrusted,    // no subject: the in-process log of an embedded router
    kEvents,     // one model's placement events of `node`
    kAgent,      // heartbeats and model-less events of `node`
    kExpire,     // expiry decisions and resync requests about `node`
    kMalformed,  // a subject no kvindex writer produces
  };
  Kind kind = kTrusted;
  std::string node;  // decoded node id (kEvents, kAgent, kExpire)
  // The class token as written: the model token (kEvents), "_agent" or
  // "_expire"; what an agent numbers on its own (docs/events.md, "Numbering").
  std::string token;
};

// The subject's last token is the node and the one before it the class
// (parsed from the end, so any --stream-prefix works). kMalformed when a
// token does not decode, the subject has fewer than three tokens, or the
// class token starts with '_' but is not a known control token.
LogSubject ParseLogSubject(std::string_view subject);

}  // namespace kvindex::consume
