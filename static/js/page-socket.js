// The page's one Socket.IO connection, shared by its live parts: live-lists.js (every signed-in page) and chat.js
// (the chat page). A module is evaluated once per page, so every part that imports this gets the same socket,
// and a signed-in chat page opens one websocket, not two (a second io("/chat") would open its own).
//
// A part adds what it needs to the handshake's `auth` (the chat's view token); the socket sends it at every
// (re)connection. A part that arrives after the connection opened finds it connected: see `whenConnected`.
let socket = null;

export function pageSocket(auth = {}) {
  if (socket === null) {
    socket = window.io("/chat", { transports: ["websocket"], auth: { ...auth } });
  } else {
    socket.auth = { ...socket.auth, ...auth };
  }
  return socket;
}

// Run `then` on each connection of the page's socket, at once if it is connected already.
export function whenConnected(then) {
  const shared = pageSocket();
  shared.on("connect", then);
  if (shared.connected) {
    then();
  }
}
