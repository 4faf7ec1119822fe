package io.starlight.rabbitmq.proxy;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import org.junit.jupiter.api.Test;

/** The header bytes against the specification's layout, written out by hand (section 2.2). */
class ProxyProtocolV2Test {
  private static final byte[] SIGNATURE = {
    '\r', '\n', '\r', '\n', 0, '\r', '\n', 'Q', 'U', 'I', 'T', '\n'
  };

  private static InetSocketAddress at(String ip, int port) throws UnknownHostException {
    return new InetSocketAddress(InetAddress.getByName(ip), port);
  }

  private static byte[] concat(byte[]... parts) {
    int length = 0;
    for (byte[] part : parts) {
      length += part.length;
    }
    byte[] out = new byte[length];
    int offset = 0;
    for (byte[] part : parts) {
      System.arraycopy(part, 0, out, offset, part.length);
      offset += part.length;
    }
    return out;
  }

  private static byte[] bytes(int... values) {
    byte[] out = new byte[values.length];
    for (int i = 0; i < values.length; i++) {
      out[i] = (byte) values[i];
    }
    return out;
  }

  @Test
  void tcp4() throws Exception {
    byte[] expected =
        concat(
            SIGNATURE,
            bytes(0x21, 0x11, 0x00, 0x0C), // v2 PROXY, INET STREAM, 12 bytes
            bytes(192, 0, 2, 7), // source
            bytes(127, 0, 0, 1), // destination
            bytes(0x9C, 0x41), // 40001
            bytes(0x16, 0x28)); // 5672
    assertArrayEquals(expected, ProxyProtocolV2.proxy(at("192.0.2.7", 40001), at("127.0.0.1", 5672)));
  }

  @Test
  void tcp6() throws Exception {
    byte[] source = InetAddress.getByName("2001:db8::1").getAddress();
    byte[] destination = InetAddress.getByName("::1").getAddress();
    byte[] expected =
        concat(SIGNATURE, bytes(0x21, 0x21, 0x00, 36), source, destination, bytes(0xFF, 0xFF, 0x00, 0x01));
    assertArrayEquals(expected, ProxyProtocolV2.proxy(at("2001:db8::1", 65535), at("::1", 1)));
  }

  @Test
  void mixedFamiliesAreSentAsIpv6WithTheIpv4AddressMapped() throws Exception {
    byte[] mapped = bytes(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 1, 2, 3);
    byte[] destination = InetAddress.getByName("::1").getAddress();
    byte[] expected =
        concat(SIGNATURE, bytes(0x21, 0x21, 0x00, 36), mapped, destination, bytes(0x00, 0x50, 0x16, 0x28));
    assertArrayEquals(expected, ProxyProtocolV2.proxy(at("10.1.2.3", 80), at("::1", 5672)));
  }

  @Test
  void local() {
    assertArrayEquals(concat(SIGNATURE, bytes(0x20, 0x00, 0x00, 0x00)), ProxyProtocolV2.local());
  }

  @Test
  void unknownAddressesGiveUnspec() {
    assertArrayEquals(
        concat(SIGNATURE, bytes(0x21, 0x00, 0x00, 0x00)),
        ProxyProtocolV2.proxy(InetSocketAddress.createUnresolved("client", 1), null));
  }
}
