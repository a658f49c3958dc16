"""Asks the X window titled NAME on DISPLAY to close, as a window manager's close button does
(a WM_DELETE_WINDOW client message). Usage: close_window.py DISPLAY NAME"""
import sys

from Xlib import X, display, protocol


def find(window, name):
    try:
        if window.get_wm_name() == name:
            return window
        for child in window.query_tree().children:
            found = find(child, name)
            if found is not None:
                return found
    except Exception:
        pass
    return None


d = display.Display(sys.argv[1])
target = find(d.screen().root, sys.argv[2])
if target is None:
    sys.exit(f"no window named {sys.argv[2]!r}")
protocols = d.intern_atom("WM_PROTOCOLS")
delete = d.intern_atom("WM_DELETE_WINDOW")
event = protocol.event.ClientMessage(window=target, client_type=protocols, data=(32, [delete, X.CurrentTime, 0, 0, 0]))
target.send_event(event)
d.flush()
