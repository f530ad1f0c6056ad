"""Devices talking: wire protocol, peers, discovery, auth and cursors (built on Site.changes / Site.merge)."""
