// The VNC console: noVNC <-> websocket <-> console proxy <-> QEMU's VNC server.
// Read-only sessions are viewOnly here, and the proxy drops their input anyway.
import RFB from "../vendor/novnc/core/rfb.js";
import KeyTable from "../vendor/novnc/core/input/keysym.js";
import keysyms from "../vendor/novnc/core/input/keysymdef.js";

const root = document.getElementById("console");
if (root && root.dataset.canOpen === "true") {
  const tickets = window.zopConsoleTicket;
  const screen = document.getElementById("screen");
  const statusBadge = document.getElementById("console-status");
  const scale = document.getElementById("scale");
  let rfb = null;
  let socket = null;
  const retry = tickets.backoff(connect);

  async function connect() {
    tickets.status(statusBadge, "Connecting…", "transitional");
    let ticket;
    try {
      ticket = await tickets.fetch(root);
    } catch (error) {
      const delay = retry.schedule();
      tickets.status(statusBadge, `${error.message} Retrying in ${Math.round(delay / 1000)} s.`, "failure");
      return;
    }
    socket = new WebSocket(ticket.url, ["binary", ticket.subprotocol]);
    rfb = new RFB(screen, socket, { shared: true });
    rfb.viewOnly = ticket.read_only;
    rfb.scaleViewport = scale.checked;
    rfb.addEventListener("connect", () => {
      retry.reset();
      tickets.status(statusBadge, ticket.read_only ? "Connected (read-only)" : "Connected", "success");
    });
    rfb.addEventListener("disconnect", (event) => {
      rfb = null;
      socket = null;
      const delay = retry.schedule();
      const how = event.detail.clean ? "Disconnected." : "Connection lost.";
      tickets.status(statusBadge, `${how} Reconnecting in ${Math.round(delay / 1000)} s.`, "failure");
    });
  }

  // Keepalive towards the proxy (it ignores text frames on VNC sessions and pings us itself).
  setInterval(() => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send('{"type": "ping"}');
  }, 20000);

  scale.addEventListener("change", () => { if (rfb) rfb.scaleViewport = scale.checked; });
  document.getElementById("fullscreen").addEventListener("click", () => {
    if (document.fullscreenElement) document.exitFullscreen();
    else screen.requestFullscreen();
  });
  const ctrlAltDel = document.getElementById("ctrl-alt-del");
  if (ctrlAltDel) ctrlAltDel.addEventListener("click", () => { if (rfb) rfb.sendCtrlAltDel(); });
  const typeSend = document.getElementById("type-text-send");
  if (typeSend) {
    typeSend.addEventListener("click", () => {
      if (!rfb) return;
      const text = document.getElementById("type-text").value;
      for (const ch of text) {
        if (ch === "\n") rfb.sendKey(KeyTable.XK_Return, "Enter");
        else if (ch === "\t") rfb.sendKey(KeyTable.XK_Tab, "Tab");
        else rfb.sendKey(keysyms.lookup(ch.codePointAt(0)));
      }
      rfb.focus();
    });
  }

  // For people and tests.
  window.zopConsole = {
    get rfb() { return rfb; },
    get socket() { return socket; },
    canvas() { return screen.querySelector("canvas"); },
  };
  connect();
}
