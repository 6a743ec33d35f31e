"""The VNC console's virtual keyboard: keys and combinations a browser keeps for itself or a
laptop lacks. Each key is "keysym:code", noVNC's KeyTable name and the DOM code it sends; a
combination presses its keys in order and lets go in reverse."""

HELD_KEYS = [
    ("Ctrl", "XK_Control_L:ControlLeft"),
    ("Alt", "XK_Alt_L:AltLeft"),
    ("Shift", "XK_Shift_L:ShiftLeft"),
    ("Super", "XK_Super_L:MetaLeft"),
]
SINGLE_KEYS = [
    ("Esc", "XK_Escape:Escape"),
    ("Tab", "XK_Tab:Tab"),
    ("Backspace", "XK_BackSpace:Backspace"),
    ("Delete", "XK_Delete:Delete"),
    ("PrtSc", "XK_Print:PrintScreen"),
    *[(f"F{n}", f"XK_F{n}:F{n}") for n in range(1, 13)],
]
KEY_COMBOS = [
    ("Ctrl+Alt+Backspace", "XK_Control_L:ControlLeft XK_Alt_L:AltLeft XK_BackSpace:Backspace"),
    *[
        (f"Ctrl+Alt+F{n}", f"XK_Control_L:ControlLeft XK_Alt_L:AltLeft XK_F{n}:F{n}")
        for n in range(1, 7)
    ],
    ("Alt+Tab", "XK_Alt_L:AltLeft XK_Tab:Tab"),
    ("Alt+F4", "XK_Alt_L:AltLeft XK_F4:F4"),
]
