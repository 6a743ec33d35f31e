"""What a VNC (RFB 3.3-3.8) client may send through the proxy.

The handshake is parsed to force ClientInit to "shared" (else QEMU drops the other viewers).
Interactive sessions then pass through; read-only ones pass only what viewing needs (pixel
format, encodings, update requests, continuous updates, fences). An unknown message type ends
the session, because its length cannot be told.
"""

import struct

PROTOCOL_VERSION_LENGTH = 12
SECURITY_NONE, SECURITY_VNC_AUTH = 1, 2
VNC_AUTH_RESPONSE_LENGTH = 16

# message type -> (forwarded for read-only sessions, fixed length or None when it varies)
SET_PIXEL_FORMAT, SET_ENCODINGS, FRAMEBUFFER_UPDATE_REQUEST = 0, 2, 3
KEY_EVENT, POINTER_EVENT, CLIENT_CUT_TEXT = 4, 5, 6
ENABLE_CONTINUOUS_UPDATES, CLIENT_FENCE, XVP, SET_DESKTOP_SIZE, GII, QEMU = (
    150, 248, 250, 251, 253, 255
)  # fmt: skip
VIEWING = {SET_PIXEL_FORMAT, SET_ENCODINGS, FRAMEBUFFER_UPDATE_REQUEST, ENABLE_CONTINUOUS_UPDATES,
           CLIENT_FENCE}  # fmt: skip


class RfbError(Exception):
    """The client sent something the filter cannot pass on safely."""


class ClientFilter:
    """Feed it the client's bytes as they come; it returns the bytes to send to the server."""

    __slots__ = ("buffer", "read_only", "stage")

    def __init__(self, *, read_only: bool) -> None:
        self.read_only = read_only
        self.stage = "version"
        self.buffer = bytearray()

    @property
    def passing_through(self) -> bool:
        return self.stage == "messages" and not self.read_only

    def feed(self, data: bytes) -> bytes:
        if self.passing_through:
            return data
        self.buffer += data
        out = bytearray()
        while self.buffer:
            if self.passing_through:
                out += self.buffer
                self.buffer.clear()
                break
            length = self._next_length()
            if length is None or len(self.buffer) < length:
                break  # wait for more bytes
            message = bytes(self.buffer[:length])
            del self.buffer[:length]
            out += self._handle(message)
        return bytes(out)

    def _next_length(self) -> int | None:
        """Length of the next whole client message, None if more bytes are needed to tell."""
        stage, data = self.stage, self.buffer
        if stage == "version":
            return PROTOCOL_VERSION_LENGTH
        if stage in ("security", "client-init"):
            return 1
        if stage == "vnc-auth":
            return VNC_AUTH_RESPONSE_LENGTH
        kind = data[0]
        fixed = {
            SET_PIXEL_FORMAT: 20,
            FRAMEBUFFER_UPDATE_REQUEST: 10,
            KEY_EVENT: 8,
            POINTER_EVENT: 6,
            ENABLE_CONTINUOUS_UPDATES: 10,
            XVP: 4,
        }
        if kind in fixed:
            return fixed[kind]
        if kind == SET_ENCODINGS:
            return None if len(data) < 4 else 4 + 4 * struct.unpack_from(">H", data, 2)[0]
        if kind == CLIENT_CUT_TEXT:  # a negative length is the extended clipboard
            return None if len(data) < 8 else 8 + abs(struct.unpack_from(">i", data, 4)[0])
        if kind == CLIENT_FENCE:
            return None if len(data) < 9 else 9 + data[8]
        if kind == SET_DESKTOP_SIZE:
            return None if len(data) < 8 else 8 + 16 * data[6]
        if kind == GII:
            return None if len(data) < 4 else 4 + struct.unpack_from(">H", data, 2)[0]
        if kind == QEMU:
            return self._qemu_length(data)
        raise RfbError(f"unknown RFB client message type {kind}")

    @staticmethod
    def _qemu_length(data: bytearray) -> int | None:
        if len(data) < 2:
            return None
        if data[1] == 0:  # extended key event
            return 12
        if data[1] == 1:  # audio: enable/disable, or set format
            if len(data) < 4:
                return None
            return 10 if struct.unpack_from(">H", data, 2)[0] == 2 else 4
        raise RfbError(f"unknown QEMU client message {data[1]}")

    def _handle(self, message: bytes) -> bytes:
        stage = self.stage
        if stage == "version":
            if not message.startswith(b"RFB 003."):
                raise RfbError("not an RFB client")
            minor = int(message[8:11])
            self.stage = "security" if minor >= 7 else "client-init"
            return message
        if stage == "security":
            if message[0] == SECURITY_NONE:
                self.stage = "client-init"
            elif message[0] == SECURITY_VNC_AUTH:
                self.stage = "vnc-auth"
            else:
                raise RfbError(f"unsupported RFB security type {message[0]}")
            return message
        if stage == "vnc-auth":
            self.stage = "client-init"
            return message
        if stage == "client-init":
            self.stage = "messages"
            return b"\x01"  # shared: never disconnect the other viewers
        return message if message[0] in VIEWING else b""
