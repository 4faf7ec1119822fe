package io.starlight.rabbitmq.proxy;

import java.net.Inet4Address;
import java.net.Inet6Address;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.nio.ByteBuffer;

/**
 * The PROXY protocol version 2 header the relay sends to the gateway before a client's first
 * byte, so that the gateway logs, throttles and authorizes the real client address
 * (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt, section 2.2).
 *
 * <p>Layout: the 12-byte signature, version 2 and the command (LOCAL 0, PROXY 1), the address
 * family and transport (INET 0x1_ / INET6 0x2_, STREAM 0x_1), the length of the rest, then the
 * source and destination addresses and ports, big-endian.
 */
public final class ProxyProtocolV2 {
  static final byte[] SIGNATURE = {
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A
  };
  private static final int VERSION_2 = 0x20;
  private static final int COMMAND_LOCAL = 0x0;
  private static final int COMMAND_PROXY = 0x1;
  private static final int INET_STREAM = 0x11;
  private static final int INET6_STREAM = 0x21;
  private static final int UNSPEC = 0x00;

  private ProxyProtocolV2() {}

  /**
   * The header for a relayed TCP connection from {@code source} to {@code destination}. Addresses
   * that are not IP socket addresses give a PROXY header with the UNSPEC family (the gateway
   * then keeps the socket's own peer); an IPv4 and an IPv6 address are both sent as IPv6.
   */
  public static byte[] proxy(SocketAddress source, SocketAddress destination) {
    if (!(source instanceof InetSocketAddress src && destination instanceof InetSocketAddress dst)
        || src.getAddress() == null
        || dst.getAddress() == null) {
      return header(COMMAND_PROXY, UNSPEC, new byte[0]);
    }
    InetAddress from = src.getAddress();
    InetAddress to = dst.getAddress();
    if (from instanceof Inet4Address && to instanceof Inet4Address) {
      return header(COMMAND_PROXY, INET_STREAM, addresses(from.getAddress(), to.getAddress(), src, dst));
    }
    return header(COMMAND_PROXY, INET6_STREAM, addresses(ipv6(from), ipv6(to), src, dst));
  }

  /** The header of a connection the relay opens itself (the readiness probe): LOCAL. */
  public static byte[] local() {
    return header(COMMAND_LOCAL, UNSPEC, new byte[0]);
  }

  private static byte[] addresses(byte[] from, byte[] to, InetSocketAddress src, InetSocketAddress dst) {
    ByteBuffer body = ByteBuffer.allocate(from.length * 2 + 4);
    body.put(from).put(to).putShort((short) src.getPort()).putShort((short) dst.getPort());
    return body.array();
  }

  /** An IPv4 address as IPv4-mapped IPv6 (::ffff:a.b.c.d), an IPv6 one as is. */
  private static byte[] ipv6(InetAddress address) {
    if (address instanceof Inet6Address) {
      return address.getAddress();
    }
    byte[] mapped = new byte[16];
    mapped[10] = (byte) 0xFF;
    mapped[11] = (byte) 0xFF;
    System.arraycopy(address.getAddress(), 0, mapped, 12, 4);
    return mapped;
  }

  private static byte[] header(int command, int familyTransport, byte[] body) {
    ByteBuffer out = ByteBuffer.allocate(16 + body.length);
    out.put(SIGNATURE)
        .put((byte) (VERSION_2 | command))
        .put((byte) familyTransport)
        .putShort((short) body.length)
        .put(body);
    return out.array();
  }
}
