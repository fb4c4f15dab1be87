#!/usr/bin/python3
"""A stand-in for systemd-logind on a private D-Bus system bus, for tests.

    fake_logind.py DIR yes|no

Starts dbus-daemon as a system bus listening on DIR/bus (its config in
DIR/bus.conf), owns org.freedesktop.login1 there and answers what
ddp-check asks of logind: the property RemoveIPC of
org.freedesktop.login1.Manager at /org/freedesktop/login1, through
org.freedesktop.DBus.Properties.Get.  Prints "ready unix:path=DIR/bus"
once the name is owned; a client reaches it with
DBUS_SYSTEM_BUS_ADDRESS=unix:path=DIR/bus.  Runs until killed (SIGTERM
ends the bus daemon too).
"""
import os
import signal
import subprocess
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={sock}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"""

MANAGER = "org.freedesktop.login1.Manager"


class Login1(dbus.service.Object):
    def __init__(self, bus, remove_ipc):
        super().__init__(bus, "/org/freedesktop/login1")
        self.remove_ipc = remove_ipc

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, interface, prop):
        if interface == MANAGER and prop == "RemoveIPC":
            return dbus.Boolean(self.remove_ipc)
        raise dbus.exceptions.DBusException(
            "unknown property %s.%s" % (interface, prop),
            name="org.freedesktop.DBus.Error.UnknownProperty")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("yes", "no"):
        sys.exit("usage: fake_logind.py DIR yes|no")
    d, remove_ipc = sys.argv[1], sys.argv[2] == "yes"
    sock = os.path.join(d, "bus")
    conf = os.path.join(d, "bus.conf")
    with open(conf, "w") as f:
        f.write(CONF.format(sock=sock))
    daemon = subprocess.Popen(["dbus-daemon", "--config-file=" + conf, "--nofork",
                               "--print-address"], stdout=subprocess.PIPE, text=True)
    address = daemon.stdout.readline().strip()
    if not address:
        sys.exit("fake_logind: dbus-daemon did not start")
    # the tasks run as other users too: the socket must be theirs to reach
    os.chmod(sock, 0o777)

    def stop(*_):
        daemon.terminate()
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    name = dbus.service.BusName("org.freedesktop.login1", bus)
    obj = Login1(bus, remove_ipc)
    print("ready unix:path=" + sock, flush=True)
    try:
        GLib.MainLoop().run()
    finally:
        del obj, name
        daemon.terminate()


if __name__ == "__main__":
    main()
