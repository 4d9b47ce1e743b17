"""What the machines and the stand-ins share: the actor loop, the clock, raw-JSON access
through the official client, object helpers, the container-log format, TLS.
"""
