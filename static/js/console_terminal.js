// Serial and exec consoles: xterm.js <-> websocket <-> console proxy <-> the guest.
// Binary frames are terminal bytes; text frames are JSON control messages (see
// instances/consoles/bridges.py). After a drop the page reconnects with a fresh ticket and
// keeps its scrollback: the proxy says where its history starts, so nothing is shown twice.
"use strict";
(() => {
  const root = document.getElementById("console");
  if (!root || root.dataset.canOpen !== "true") return;
  const tickets = window.zopConsoleTicket;
  const lineMode = root.dataset.lineMode === "true";
  const statusBadge = document.getElementById("console-status");
  const keyboardStatus = document.getElementById("keyboard-status");
  const viewerCount = document.getElementById("viewer-count");
  const takeButton = document.getElementById("take-over");
  const endButton = document.getElementById("end-session");  // a cloud exec session's
  const newButton = document.getElementById("new-session");
  const SESSION_ENDED = 4411;  // the proxy ended a session channel: offer a new one, not a retry

  const term = new Terminal({
    ...window.zopTerminalOptions, convertEol: lineMode, cursorBlink: true, scrollback: 10000,
  });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  fit.fit();
  window.addEventListener("resize", () => fit.fit());

  const encoder = new TextEncoder();
  let socket = null;
  let readOnly = true;
  let mine = false;
  let epoch = null;   // which output stream `seen` counts in
  let seen = 0;       // stream offset just after the last byte written to the terminal
  let history = 0;    // bytes of the coming history frame (0: none expected)
  let historySkip = 0;
  let lastPong = 0;
  let ends = false;   // the session is a channel of its own, which the keyboard holder can end
  const retry = tickets.backoff(connect);

  function send(data) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(data);
  }

  function sendJson(message) { send(JSON.stringify(message)); }

  function showKeyboard(message) {
    mine = !!message.mine;
    term.options.disableStdin = !mine;
    if (readOnly) {
      keyboardStatus.textContent = "Read-only: you are watching";
    } else if (mine) {
      keyboardStatus.textContent = "You have the keyboard";
    } else {
      keyboardStatus.textContent = message.holder ? `${message.holder} has the keyboard` : "Nobody has the keyboard";
    }
    takeButton.hidden = readOnly || mine;
    if (endButton) endButton.hidden = !(ends && mine && !readOnly);
  }

  function hello(message) {
    readOnly = !!message.read_only;
    ends = !!message.ends;
    tickets.status(statusBadge, readOnly ? "Connected (read-only)" : "Connected", "success");
    const start = message.position - message.history;
    history = message.history;
    historySkip = 0;
    if (epoch === message.epoch && seen >= start) {
      historySkip = Math.min(seen - start, message.history);  // already on screen
    } else if (epoch === message.epoch && seen > 0) {
      term.write("\r\n\x1b[2m[… output missed while disconnected …]\x1b[0m\r\n");
    } else if (epoch !== null) {
      term.write("\r\n\x1b[2m[new console session]\x1b[0m\r\n");
    }
    epoch = message.epoch;
    seen = start + historySkip;
    if (!history) seen = message.position;
    viewerCount.textContent = `${message.viewers} viewer${message.viewers === 1 ? "" : "s"}`;
    showKeyboard(message);
    sendJson({ type: "resize", cols: term.cols, rows: term.rows });
  }

  function control(message) {
    if (message.type === "hello") hello(message);
    else if (message.type === "keyboard") showKeyboard(message);
    else if (message.type === "viewers") viewerCount.textContent = `${message.viewers} viewer${message.viewers === 1 ? "" : "s"}`;
    else if (message.type === "pong") lastPong = Date.now();
    else if (message.type === "error") term.write(`\r\n\x1b[31m${message.message}\x1b[0m\r\n`);
    else if (message.type === "closed") term.write(`\r\n\x1b[2m[${message.reason}]\x1b[0m\r\n`);
  }

  function output(bytes) {
    if (history) {
      const fresh = bytes.subarray(historySkip);
      history = 0;
      seen += fresh.length;
      term.write(fresh);
      return;
    }
    seen += bytes.length;
    term.write(bytes);
  }

  // exec: the guest end is not a terminal, so lines are edited and echoed here.
  let line = "";
  function typeLineMode(data) {
    for (const ch of data) {
      if (ch === "\r" || ch === "\n") {
        term.write("\r\n");
        send(encoder.encode(line + "\n"));
        line = "";
      } else if (ch === "\x7f" || ch === "\b") {
        if (line) { line = line.slice(0, -1); term.write("\b \b"); }
      } else if (ch === "\x03") {
        term.write("^C\r\n");
        line = "";
      } else if (ch >= " " || ch === "\t") {
        line += ch;
        term.write(ch);
      }
    }
  }

  term.onData((data) => {
    if (!mine || readOnly) return;
    if (lineMode) typeLineMode(data);
    else send(encoder.encode(data));
  });
  term.onResize(({ cols, rows }) => sendJson({ type: "resize", cols, rows }));
  takeButton.addEventListener("click", () => { sendJson({ type: "take" }); term.focus(); });
  if (endButton) endButton.addEventListener("click", () => sendJson({ type: "end" }));
  if (newButton) newButton.addEventListener("click", () => { newButton.hidden = true; connect(); });

  // The proxy pings us; we ping it too, and reconnect when it stops answering.
  setInterval(() => {
    if (!socket || socket.readyState !== WebSocket.OPEN) return;
    if (lastPong && Date.now() - lastPong > 50000) { socket.close(); return; }
    sendJson({ type: "ping" });
  }, 20000);

  async function connect() {
    const ticket = await tickets.open(root, statusBadge, retry);
    if (!ticket) return;
    const ws = new WebSocket(ticket.url, ["zopday.console", ticket.subprotocol]);
    ws.binaryType = "arraybuffer";
    socket = ws;
    ws.onopen = () => {
      retry.reset();
      lastPong = Date.now();
      tickets.status(statusBadge, "Opening the console…", "transitional");
    };
    ws.onmessage = (event) => {
      if (typeof event.data === "string") control(JSON.parse(event.data));
      else output(new Uint8Array(event.data));
    };
    ws.onclose = (event) => {
      if (socket !== ws) return;
      socket = null;
      mine = false;
      takeButton.hidden = true;
      if (endButton) endButton.hidden = true;
      if (event.code === SESSION_ENDED) {
        tickets.status(statusBadge, `Session ended: ${event.reason || "closed."}`, "failure");
        if (newButton) newButton.hidden = false;
        return;
      }
      const delay = retry.schedule();
      const why = event.reason || `connection lost (${event.code}).`;
      tickets.status(statusBadge, `Disconnected: ${why} Reconnecting in ${Math.round(delay / 1000)} s.`, "failure");
    };
  }

  // For people and tests: the terminal and its text.
  window.zopConsole = {
    term,
    get socket() { return socket; },
    get mine() { return mine; },
    text() {
      const buffer = term.buffer.active;
      const lines = [];
      for (let i = 0; i < buffer.length; i += 1) lines.push(buffer.getLine(i).translateToString(true));
      return lines.join("\n");
    },
  };
  connect();
  term.focus();
})();
