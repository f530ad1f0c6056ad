"""Peer discovery on the LAN with zeroconf (mDNS/DNS-SD), service type ``_crr._tcp.local.``.

Each site announces ``<site id>._crr._tcp.local.`` with its address and port, browses for the others
and hands every peer it finds (or finds again at a new address) to the sync service, which dials it
and keeps redialling. Discovered and static peers work together: the service keeps one connection
per peer site.
"""

from __future__ import annotations

import logging
import socket
from typing import Callable

from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, ServiceStateChange, Zeroconf

SERVICE = "_crr._tcp.local."
log = logging.getLogger("crr.sync")


class Discovery:
    """Announce this site and report peers found on the network."""

    def __init__(self, site_id: str, address: tuple[str, int], on_peer: Callable[[str, int], None],
                 interfaces: list[str] | None = None) -> None:
        self.site_id = site_id
        self.address = address
        self.on_peer = on_peer
        self.interfaces = interfaces
        self.found: dict[str, tuple[str, int]] = {}
        self._zc: Zeroconf | None = None
        self._info: ServiceInfo | None = None

    def start(self) -> "Discovery":
        """Register this site and start browsing."""
        kwargs = {"ip_version": IPVersion.V4Only}
        if self.interfaces is not None:
            kwargs["interfaces"] = self.interfaces
        self._zc = Zeroconf(**kwargs)
        host, port = self.address
        announce = host if host not in ("0.0.0.0", "") else socket.gethostbyname(socket.gethostname())
        self._info = ServiceInfo(SERVICE, f"{self.site_id}.{SERVICE}", addresses=[socket.inet_aton(announce)],
                                 port=port, properties={"site": self.site_id})
        self._zc.register_service(self._info, allow_name_change=True)  # another device may use the name
        ServiceBrowser(self._zc, SERVICE, handlers=[self._changed])
        return self

    def _changed(self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            self.found.pop(name, None)
            log.info("peer %s left the network", name)
            return
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is None or not info.addresses:
            return
        site = (info.properties or {}).get(b"site", b"").decode()
        if site == self.site_id:
            return
        where = (socket.inet_ntoa(info.addresses[0]), int(info.port))
        if self.found.get(name) != where:
            self.found[name] = where
            log.info("discovered peer %s at %s:%s", site or name, *where)
            self.on_peer(*where)

    def stop(self) -> None:
        """Withdraw the announcement and stop browsing."""
        if self._zc is not None:
            if self._info is not None:
                self._zc.unregister_service(self._info)
            self._zc.close()
            self._zc = None
