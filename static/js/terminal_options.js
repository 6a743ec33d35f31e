// How the consoles' terminals look, shared by the live console and the replay.
// At a line height of 1 the underscore falls below the row and is clipped at a device pixel
// ratio of 1 ("x86_64" read "x86 64"); 1.2 leaves it room. DejaVu Sans Mono ships with Debian.
"use strict";
window.zopTerminalOptions = Object.freeze({
  fontFamily: '"DejaVu Sans Mono", "Liberation Mono", ui-monospace, Menlo, Consolas, monospace',
  fontSize: 14,
  lineHeight: 1.2,
});
