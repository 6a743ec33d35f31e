#!/usr/bin/env bash
# Copy the front-end packages named in package.json from the npm registry into static/vendor/,
# each with its license. Rerun after changing a version in package.json; commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
npm install --no-audit --no-fund --silent
rm -rf static/vendor
copy() {  # copy PACKAGE DEST FILE...
    local package=$1 dest=static/vendor/$2
    shift 2
    mkdir -p "$dest"
    for file in "$@"; do cp -r "node_modules/$package/$file" "$dest/"; done
    cp "node_modules/$package/LICENSE"* "$dest/" 2>/dev/null || cp "node_modules/$package/license"* "$dest/"
    node -e "console.log(require('./node_modules/$package/package.json').version)" > "$dest/VERSION"
}
copy htmx.org htmx dist/htmx.min.js
copy @xterm/xterm xterm lib/xterm.js css/xterm.css
copy @xterm/addon-fit xterm-addon-fit lib/addon-fit.js
# noVNC is native ES modules, loaded as they are: its core/ and the vendor/ code core/ imports.
copy @novnc/novnc novnc core vendor
echo "Vendored into static/vendor:"; find static/vendor -type f | sort
