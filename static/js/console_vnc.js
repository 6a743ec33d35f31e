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
    const ticket = await tickets.open(root, statusBadge, retry);
    if (!ticket) return;
    socket = new WebSocket(ticket.url, ["binary", ticket.subprotocol]);
    rfb = new RFB(screen, socket, { shared: true });
    rfb.viewOnly = ticket.read_only;
    rfb.scaleViewport = scale.checked;
    rfb.addEventListener("connect", () => {
      retry.reset();
      tickets.status(statusBadge, ticket.read_only ? "Connected (read-only)" : "Connected", "success");
    });
    rfb.addEventListener("disconnect", (event) => {
      for (const button of held) button.setAttribute("aria-pressed", "false");  // none held anew
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

  // The virtual keyboard: "XK_name:Code" tokens (instances/consoles/virtual_keys.py).
  function keyOf(token) {
    const [name, code] = token.split(":");
    return { keysym: KeyTable[name], code };
  }
  const held = [...document.querySelectorAll("[data-hold]")];
  function letGo() {  // held keys last for one key or one text
    for (const button of held) {
      if (button.getAttribute("aria-pressed") !== "true") continue;
      const key = keyOf(button.dataset.hold);
      if (rfb) rfb.sendKey(key.keysym, key.code, false);
      button.setAttribute("aria-pressed", "false");
    }
  }
  for (const button of held) {
    button.addEventListener("click", () => {
      if (!rfb) return;
      const down = button.getAttribute("aria-pressed") !== "true";
      const key = keyOf(button.dataset.hold);
      rfb.sendKey(key.keysym, key.code, down);
      button.setAttribute("aria-pressed", String(down));
      rfb.focus();
    });
  }
  for (const button of document.querySelectorAll("[data-keys]")) {
    button.addEventListener("click", () => {
      if (!rfb) return;
      const keys = button.dataset.keys.split(" ").map(keyOf);
      for (const key of keys) rfb.sendKey(key.keysym, key.code, true);
      for (const key of keys.reverse()) rfb.sendKey(key.keysym, key.code, false);
      letGo();
      rfb.focus();
    });
  }

  // QEMU turns a keysym into the key that makes it, not the Shift it also needs: characters
  // typed with Shift on a US keyboard are sent with Shift held, unless the user holds it.
  const SHIFTED = /[A-Z~!@#$%^&*()_+{}|:"<>?]/;
  const shift = document.querySelector('[data-hold^="XK_Shift_L:"]');
  function typeChar(ch) {
    if (ch === "\n") return rfb.sendKey(KeyTable.XK_Return, "Enter");
    if (ch === "\t") return rfb.sendKey(KeyTable.XK_Tab, "Tab");
    const needsShift = SHIFTED.test(ch) && !(shift && shift.getAttribute("aria-pressed") === "true");
    if (needsShift) rfb.sendKey(KeyTable.XK_Shift_L, "ShiftLeft", true);
    rfb.sendKey(keysyms.lookup(ch.codePointAt(0)));
    if (needsShift) rfb.sendKey(KeyTable.XK_Shift_L, "ShiftLeft", false);
  }

  const typeSend = document.getElementById("type-text-send");
  if (typeSend) {
    typeSend.addEventListener("click", () => {
      if (!rfb) return;
      for (const ch of document.getElementById("type-text").value) typeChar(ch);
      letGo();
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
