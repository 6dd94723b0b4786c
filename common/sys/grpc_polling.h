// grpc_polling.h: chooses how gRPC waits for its connections in this process.
//
// gRPC's default engine on Linux (epoll1) has one epoll set for the whole
// process: whichever thread waits inside gRPC reads every connection. With
// "poll", a thread waiting on a call polls only that call's connection.
//
// The replica needs the latter. Its main thread waits in gRPC for the
// agent's events; its acknowledgements (one per synchronous commit) go on a
// connection of their own (ControlClient::OpenAckSession), and the agent's
// gRPC answers each with an HTTP/2 WINDOW_UPDATE. With epoll1 the main
// thread would wake to read every one of those; with "poll" they wait in
// the socket until the next acknowledgement is written, or until gRPC's
// backup poller (every 5 s) reads them when idle.
//
// Thread-safety: call once, first thing in main(), before any gRPC object
// exists and before any other thread starts (it sets an environment
// variable, which gRPC reads when it initializes).
#ifndef WALSHIP_COMMON_SYS_GRPC_POLLING_H_
#define WALSHIP_COMMON_SYS_GRPC_POLLING_H_

namespace walship {

// Selects gRPC's "poll" engine unless GRPC_POLL_STRATEGY is already set
// (an operator's choice wins).
void PollEachCallsOwnConnections();

}  // namespace walship

#endif  // WALSHIP_COMMON_SYS_GRPC_POLLING_H_
