# yaml.awk: flatten the small YAML subset that NoCloud seeds use into
# "path<TAB>value" lines, e.g.
#     users.0.name	spx
#     ethernets.eth0.addresses.0	10.77.0.5/24
#     write_files.0.content	line one\nline two\n
# List items get 0-based indexes.  In values a backslash is written as "\\"
# and a newline as "\n", so every entry stays on one line; nocloud.sh
# decodes them again.  A key whose value is null is printed with an empty
# value.
#
# The guest has only busybox, so there is no real YAML parser; this covers
# what cloud-config, meta-data and netplan-v2 network-config files written
# by humans or by ZopDay use:
#   - block maps and block lists (also "key:" followed by "- item" at the
#     same indent, and "- key: value" items that open a map),
#   - plain, 'single' and "double" quoted scalars,
#   - flow collections on one line: [a, b], {a: b, c: [d]},
#   - block scalars |, |-, |+, >, >- (folded ">" joins lines with spaces),
#   - comments, "---" and "..." markers.
# Not covered: anchors/aliases, tags, multi-line plain or quoted scalars,
# complex keys, several documents.
#
# Written for busybox awk (no gawk extensions).

function emit(path, v,    o, i, c) {
    o = ""
    for (i = 1; i <= length(v); i++) {
        c = substr(v, i, 1)
        if (c == "\\") o = o "\\\\"
        else if (c == "\n") o = o "\\n"
        else o = o c
    }
    print path "\t" o
}

function join(base, key) { return base == "" ? key : base "." key }

function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t\r]+$/, "", s); return s }

# Remove a trailing comment (" #..."), ignoring '#' inside quotes.
function strip_comment(s,    i, c, q, prev) {
    q = ""; prev = " "
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (q != "") {
            if (q == "\"" && c == "\\") { i++; prev = "x"; continue }
            if (c == q) q = ""
        } else if ((c == "\"" || c == "'") && (prev == " " || prev == "\t" || prev == "[" || prev == "{" || prev == "," || prev == ":")) {
            q = c
        } else if (c == "#" && (prev == " " || prev == "\t")) {
            return substr(s, 1, i - 1)
        }
        prev = c
    }
    return s
}

# Decode a complete scalar token (quoted or plain).
function scalar(s,    c, o, i, q) {
    s = trim(s)
    c = substr(s, 1, 1)
    if (c == "'" && substr(s, length(s), 1) == "'" && length(s) >= 2) {
        s = substr(s, 2, length(s) - 2); o = ""
        for (i = 1; i <= length(s); i++) {
            q = substr(s, i, 1)
            if (q == "'" && substr(s, i + 1, 1) == "'") i++
            o = o q
        }
        return o
    }
    if (c == "\"" && substr(s, length(s), 1) == "\"" && length(s) >= 2)
        return dq(substr(s, 2, length(s) - 2))
    if (s == "~" || s == "null" || s == "Null" || s == "NULL") return ""
    return s
}

# Unescape the body of a "double quoted" scalar (common escapes only).
function dq(s,    o, i, c, n) {
    o = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" && i < length(s)) {
            n = substr(s, ++i, 1)
            if (n == "n") c = "\n"
            else if (n == "t") c = "\t"
            else if (n == "r") c = "\r"
            else if (n == "0") c = ""
            else c = n
        }
        o = o c
    }
    return o
}

# ---- flow collections: recursive descent over the global string F at FP.
function isend(ch) { return ch == "" || ch == " " || ch == "\t" || ch == "," || ch == "]" || ch == "}" }

function fskip() { while (FP <= length(F) && substr(F, FP, 1) ~ /[ \t]/) FP++ }

function fscalar(iskey,    c, q, start, o) {
    fskip(); c = substr(F, FP, 1)
    if (c == "\"" || c == "'") {
        q = c; start = FP; FP++
        while (FP <= length(F)) {
            c = substr(F, FP, 1)
            if (q == "\"" && c == "\\") { FP += 2; continue }
            if (c == q) {
                if (q == "'" && substr(F, FP + 1, 1) == "'") { FP += 2; continue }
                break
            }
            FP++
        }
        o = substr(F, start, FP - start + 1); FP++
        return scalar(o)
    }
    start = FP
    while (FP <= length(F)) {
        c = substr(F, FP, 1)
        if (c == "," || c == "]" || c == "}") break
        if (c == ":" && isend(substr(F, FP + 1, 1))) break
        FP++
    }
    return scalar(substr(F, start, FP - start))
}

function fvalue(path,    c, i, k) {
    fskip(); c = substr(F, FP, 1)
    if (c == "[") {
        FP++; i = 0; fskip()
        if (substr(F, FP, 1) == "]") { FP++; return }
        while (FP <= length(F)) {
            fvalue(path "." i); i++; fskip()
            c = substr(F, FP, 1); FP++
            if (c != ",") return
            fskip(); if (substr(F, FP, 1) == "]") { FP++; return }
        }
        return
    }
    if (c == "{") {
        FP++; fskip()
        if (substr(F, FP, 1) == "}") { FP++; return }
        while (FP <= length(F)) {
            k = fscalar(1); fskip()
            if (substr(F, FP, 1) == ":") { FP++; fvalue(join(path, k)) }
            else emit(join(path, k), "")
            fskip(); c = substr(F, FP, 1); FP++
            if (c != ",") return
            fskip(); if (substr(F, FP, 1) == "}") { FP++; return }
        }
        return
    }
    emit(path, fscalar(0))
}

# ---- block structure.  The stack holds open collections: their indent,
# path, kind ("map" or "list") and, for lists, the next index.
function push(ind, path, kind) { SP++; SI[SP] = ind; SPATH[SP] = path; SK[SP] = kind; SN[SP] = 0 }

# Handle the value part of "key: value" (or of a "- value" item) at path.
function value(path, v, keyind, islist) {
    v = trim(v)
    if (v == "") { PEND = path; PIND = keyind; PLIST = islist; return }
    if (v ~ /^[|>][-+0-9]*$/) {
        BS = path; BSSTYLE = substr(v, 1, 1)
        BSCHOMP = (v ~ /-/) ? "strip" : (v ~ /\+/) ? "keep" : "clip"
        BSPARENT = keyind; BSIND = -1; BSTEXT = ""; BSN = 0
        return
    }
    if (substr(v, 1, 1) == "[" || substr(v, 1, 1) == "{") { F = v; FP = 1; fvalue(path); return }
    emit(path, scalar(v))
}

function finish_block(    t, i, n) {
    # Lines were collected in BSL[1..BSN] without their indentation.
    n = BSN
    if (BSCHOMP != "keep") while (n > 0 && BSL[n] == "") n--
    t = ""
    for (i = 1; i <= n; i++) {
        if (BSSTYLE == "|") t = t BSL[i] "\n"
        else {
            # folded: lines join with a space; an empty line is a newline
            if (BSL[i] == "") t = t "\n"
            else t = t (i > 1 && BSL[i - 1] != "" ? " " : "") BSL[i]
        }
    }
    if (BSSTYLE == ">" && n > 0) t = t "\n"
    if (BSCHOMP == "strip") sub(/\n+$/, "", t)
    if (BSCHOMP == "keep") for (i = n + 1; i <= BSN; i++) t = t "\n"
    emit(BS, t)
    BS = ""
}

# Is s of the form "key:" or "key: value"?  Sets KEY and KREST.
function keyval(s,    i, c, q) {
    c = substr(s, 1, 1)
    if (c == "[" || c == "{" || c == "-" && substr(s, 2, 1) ~ /^( |)$/) return 0
    if (c == "\"" || c == "'") {
        q = c
        for (i = 2; i <= length(s); i++) if (substr(s, i, 1) == q) break
        if (substr(s, i + 1, 1) != ":") return 0
        KEY = scalar(substr(s, 1, i)); KREST = substr(s, i + 2)
        return KREST == "" || KREST ~ /^[ \t]/
    }
    i = index(s, ": ")
    if (i == 0) {
        if (substr(s, length(s), 1) != ":") return 0
        i = length(s)
    }
    KEY = trim(substr(s, 1, i - 1)); KREST = substr(s, i + 1)
    return KEY != ""
}

BEGIN { SP = 0; push(-1, "", "map"); PEND = ""; BS = "" }

{
    line = $0
    sub(/\r$/, "", line)

    if (BS != "") {
        # inside a block scalar: take lines indented deeper than its key
        match(line, /^ */); ind = RLENGTH
        if (line ~ /^[ \t]*$/) { BSL[++BSN] = ""; next }
        if (BSIND < 0 && ind > BSPARENT) BSIND = ind
        if (BSIND >= 0 && ind >= BSIND) { BSL[++BSN] = substr(line, BSIND + 1); next }
        finish_block()
    }

    if (line ~ /^[ \t]*#/ || line ~ /^[ \t]*$/) next
    if (line ~ /^(---|\.\.\.)([ \t]|$)/) next
    line = strip_comment(line)
    match(line, /^ */); ind = RLENGTH
    t = trim(substr(line, ind + 1))
    if (t == "") next
    isdash = (t ~ /^-( |$)/)

    # A key (or item) that was waiting for its value gets a nested block.
    if (PEND != "") {
        if (ind > PIND || (isdash && ind == PIND && PLIST == 0)) {
            push(ind, PEND, isdash ? "list" : "map")
        } else emit(PEND, "")
        PEND = ""
    }
    # Close collections this line is outside of.
    while (SP > 1 && (SI[SP] > ind || (SI[SP] == ind && SK[SP] == "list" && !isdash))) SP--

    # "- " items, possibly nested ("- - x") or opening a map ("- k: v").
    while (t ~ /^-( |$)/) {
        if (SK[SP] != "list" || SI[SP] != ind) push(ind, SPATH[SP], "list")
        item = SPATH[SP] "." SN[SP]; SN[SP]++
        dind = ind
        rest = substr(t, 2); match(rest, /^ */)
        ind = ind + 1 + RLENGTH; t = substr(rest, RLENGTH + 1)
        if (t == "") { PEND = item; PIND = dind; PLIST = 1; next }
        if (t ~ /^-( |$)/) { push(ind, item, "list"); continue }
        if (keyval(t)) { push(ind, item, "map"); break }
        value(item, t, dind, 1)
        next
    }
    if (keyval(t)) {
        if (SK[SP] != "map" || SI[SP] != ind) {
            # first key of a map nested under an item or a key
            if (SI[SP] < ind) push(ind, SPATH[SP], "map")
        }
        value(join(SPATH[SP], KEY), KREST, ind, 0)
        next
    }
    # A flow collection standing alone, e.g. a JSON meta-data file.
    if (substr(t, 1, 1) == "{" || substr(t, 1, 1) == "[") { F = t; FP = 1; fvalue(SPATH[SP]); next }
    # Anything else (e.g. a continuation line) is ignored.
}

END {
    if (BS != "") finish_block()
    if (PEND != "") emit(PEND, "")
}
