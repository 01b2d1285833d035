"""`gridlane agent`: the program on VMs and bare metal that claims work through the API and runs it.

Importable without Django: it speaks only HTTP to the portal.
"""
