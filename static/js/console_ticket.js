// Console tickets and reconnection, shared by the terminal and VNC pages (no build step).
// A ticket is fetched (POST, CSRF) right before each websocket is opened; it travels in the
// websocket subprotocol list, never in the URL, and works once within a minute.
"use strict";
window.zopConsoleTicket = {
  async fetch(root) {
    const response = await fetch(root.dataset.ticketUrl, {
      method: "POST",
      headers: { "X-CSRFToken": root.dataset.csrf },
      credentials: "same-origin",
    });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = new Error(body.detail || `the console is not available (HTTP ${response.status})`);
      error.status = response.status;
      throw error;
    }
    return body;
  },

  // A fresh ticket, saying so on the status badge; on failure, the reason and the next try
  // scheduled on retry (a backoff), and null.
  async open(root, badge, retry) {
    this.status(badge, "Connecting…", "transitional");
    try {
      return await this.fetch(root);
    } catch (error) {
      const delay = retry.schedule();
      this.status(badge, `${error.message} Retrying in ${Math.round(delay / 1000)} s.`, "failure");
      return null;
    }
  },

  // Calls connect() again after 1, 2, 4 ... 15 s; reset() after a successful connection.
  backoff(connect) {
    let attempt = 0;
    let timer = null;
    return {
      schedule() {
        clearTimeout(timer);
        const delay = Math.min(15000, 1000 * 2 ** attempt);
        attempt += 1;
        timer = setTimeout(connect, delay);
        return delay;
      },
      reset() { attempt = 0; },
    };
  },

  status(element, text, tone) {
    element.textContent = text;
    element.className = `badge ${tone || ""}`.trim();
  },
};
