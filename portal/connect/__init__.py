"""Connect: the browser reaches a job's web server (a notebook's Jupyter, an app it publishes) only through
the portal, at `/connect/<workload id>/...`, and only past the portal's own sign-in.

`gate` decides each request (who asks, may they, where it goes: Django, synchronous); `proxy` is the ASGI
app that passes requests and WebSockets on and back, streaming (aiohttp's client to the job's server,
uvicorn's server to the browser); `tunnel` reaches nodes the portal cannot route to through their fabric's
login node; `pages` are the few answers of its own. portal/asgi.py puts it in front of Django.
"""
