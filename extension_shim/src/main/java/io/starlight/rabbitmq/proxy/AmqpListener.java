package io.starlight.rabbitmq.proxy;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** One entry of {@code amqpListeners}: {@code amqp[s]://host[:port]}, as the gateway reads it. */
public record AmqpListener(String scheme, String host, int port) {
  private static final Pattern URL =
      Pattern.compile("(?i)(amqps?)://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?/?");
  /** An IP address written out (IPv4 dotted, or IPv6 with its colons): no name to resolve. */
  private static final Pattern LITERAL = Pattern.compile("[0-9]{1,3}(\\.[0-9]{1,3}){3}|.*:.*");

  public boolean tls() {
    return scheme.equals("amqps");
  }

  /**
   * Whether only this machine reaches it: a loopback address (127.0.0.0/8, ::1) or localhost. Any
   * other name counts as remote: nothing is resolved to decide (the gateway decides the same way,
   * gateway/server/address.py).
   */
  public boolean local() {
    if (host.equalsIgnoreCase("localhost")) {
      return true;
    }
    if (!LITERAL.matcher(host).matches()) {
      return false;
    }
    try {
      return InetAddress.getByName(host).isLoopbackAddress(); // a literal: no lookup
    } catch (UnknownHostException e) {
      return false;
    }
  }

  public InetSocketAddress address() {
    return new InetSocketAddress(host, port);
  }

  public String url() {
    return scheme + "://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + port;
  }

  /** The comma-separated list; empty entries are skipped, as the gateway does. */
  public static List<AmqpListener> parseList(String text) throws ShimConfigException {
    List<AmqpListener> listeners = new ArrayList<>();
    for (String item : text.split(",")) {
      if (!item.isBlank()) {
        listeners.add(parse(item.trim()));
      }
    }
    if (listeners.isEmpty()) {
      throw new ShimConfigException("amqpListeners: must list at least one amqp://<host>:<port>");
    }
    return listeners;
  }

  public static AmqpListener parse(String item) throws ShimConfigException {
    Matcher match = URL.matcher(item);
    if (!match.matches()) {
      throw new ShimConfigException(
          "amqpListeners: listener '" + item + "' is not of the form amqp[s]://<host>:<port>");
    }
    String scheme = match.group(1).toLowerCase(Locale.ROOT);
    String host = match.group(2);
    if (host.startsWith("[")) {
      host = host.substring(1, host.length() - 1);
    }
    int port = scheme.equals("amqps") ? 5671 : 5672;
    if (match.group(3) != null) {
      port = Integer.parseInt(match.group(3));
      if (port < 1 || port > 65535) {
        throw new ShimConfigException(
            "amqpListeners: listener '" + item + "' has port " + port + ", outside 1..65535");
      }
    }
    return new AmqpListener(scheme, host, port);
  }
}
