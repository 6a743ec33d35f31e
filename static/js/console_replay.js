// Replays an asciicast v2 recording into xterm.js with its timing (scaled by the speed).
"use strict";
(() => {
  const root = document.getElementById("replay");
  if (!root) return;
  const status = document.getElementById("replay-status");
  const term = new Terminal({ ...window.zopTerminalOptions, convertEol: false, scrollback: 10000 });
  term.open(document.getElementById("terminal"));
  let events = [];
  let run = 0;

  async function load() {
    const response = await fetch(root.dataset.recordingUrl, { credentials: "same-origin" });
    const lines = (await response.text()).split("\n").filter(Boolean);
    const header = JSON.parse(lines[0]);
    term.resize(Math.min(header.width || 80, 300), Math.min(header.height || 24, 100));
    events = lines.slice(1).map((line) => JSON.parse(line));
    status.textContent = `${events.length} events`;
  }

  async function play() {
    const mine = ++run;
    term.reset();
    const speed = Number(document.getElementById("replay-speed").value);
    let clock = 0;
    for (const [time, type, data] of events) {
      if (speed > 0 && time > clock) {
        await new Promise((resolve) => setTimeout(resolve, Math.min(2000, ((time - clock) * 1000) / speed)));
        clock = time;
      }
      if (mine !== run) return;  // restarted
      if (type === "o") term.write(data);
      else if (type === "r") {
        const [cols, rows] = data.split("x").map(Number);
        if (cols && rows) term.resize(Math.min(cols, 300), Math.min(rows, 100));
      }
    }
    status.textContent = "Finished";
  }

  document.getElementById("replay-play").addEventListener("click", play);
  window.zopReplay = { term, play, get events() { return events; } };
  load().then(play).catch((error) => { status.textContent = `Cannot load the recording: ${error.message}`; });
})();
