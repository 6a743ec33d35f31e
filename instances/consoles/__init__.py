"""Browser consoles: tickets, the websocket console proxy and its bridges to the backends.

The web app issues tickets (tickets.py) for the console kinds of the registry (registry.py); the
proxy (proxy.py, run by `manage.py consoleproxy`) admits a websocket with one (sessions.py) and
bridges it to the instance's serial, VNC or exec socket (bridges/, rfb.py), recording terminal
sessions as asciicast v2 files (recording.py).
"""
