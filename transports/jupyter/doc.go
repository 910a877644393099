// Package jupyter is the transport for kernels behind a Jupyter Server (or a
// Kernel Gateway / Enterprise Gateway, which speak the same API).
//
// It owns the REST calls (kernel specs, create, interrupt, restart, delete) and
// the kernel's channels websocket, over which it speaks the Jupyter messaging
// protocol 5.x: either the JSON frames of jupyter-server 1.x or, where the
// server offers it, the binary v1.kernel.websocket.jupyter.org subprotocol.
// Every message the kernel emits for a request comes out of Kernel.Messages as
// a core.Message; kernel-wide events (restart, death, a lost connection) carry
// ParentID "".
//
// Why some things are the way they are (see docs/jupyter.md):
//   - The server does not set TCP_NODELAY on the websocket, so on Linux the
//     client re-arms TCP_QUICKACK after every read; otherwise Nagle on the
//     server and delayed ACKs here cost ~40 ms per round trip.
//   - Messages are only forwarded for requests this client sent since the last
//     restart or disconnect, so nothing of an earlier request can follow a
//     restarting or disconnected status.
//   - A start ends with a kernel_info_reply on the new websocket: a kernel
//     whose websocket stays silent is deleted and replaced (transport.go).
//     Every kernel id the server hands out is deleted in the end, those of
//     abandoned starts included (reap.go).
package jupyter
