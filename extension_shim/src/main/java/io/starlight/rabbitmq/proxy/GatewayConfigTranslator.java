package io.starlight.rabbitmq.proxy;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

/**
 * proxy.conf to the gateway's configuration file. The same file configures both (reference/002):
 * every gateway key found in proxy.conf is passed on as written, the broker URLs, TLS and broker
 * authentication the proxy itself uses included. Nothing else is passed: the gateway refuses keys
 * it does not know, and proxy.conf is full of them.
 */
public final class GatewayConfigTranslator {
  /** Generated from gateway/config.py by scripts/config_table.py --keys; a Python test checks it. */
  static final String KEYS_RESOURCE = "gateway-keys.txt";

  /** Pulsar's "no authentication" plugin: the gateway's empty value. */
  static final String AUTHENTICATION_DISABLED =
      "org.apache.pulsar.client.impl.auth.AuthenticationDisabled";

  /** The keys of the gateway's amqps listeners (reference/002's TLS table, minus the two that
   * also concern its connection to the brokers: tlsAllowInsecureConnection and
   * tlsHostnameVerificationEnabled). */
  static final List<String> LISTENER_TLS_KEYS =
      List.of(
          "tlsCertRefreshCheckDurationSec",
          "tlsCertificateFilePath",
          "tlsKeyFilePath",
          "tlsTrustCertsFilePath",
          "tlsRequireTrustedClientCertOnConnect",
          "tlsProtocols",
          "tlsCiphers",
          "tlsEnabledWithKeyStore",
          "tlsProvider",
          "tlsKeyStoreType",
          "tlsKeyStore",
          "tlsKeyStorePassword",
          "tlsTrustStoreType",
          "tlsTrustStore",
          "tlsTrustStorePassword");

  private GatewayConfigTranslator() {}

  /** The gateway's keys, in the order of its documentation. */
  public static Set<String> gatewayKeys() {
    Set<String> keys = new LinkedHashSet<>();
    try (InputStream in = GatewayConfigTranslator.class.getResourceAsStream(KEYS_RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(KEYS_RESOURCE + " is missing from the extension");
      }
      BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
      String line;
      while ((line = reader.readLine()) != null) {
        if (!line.isBlank() && !line.startsWith("#")) {
          keys.add(line.trim());
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return keys;
  }

  /**
   * The gateway configuration for {@code proxy} (the proxy's properties, as read from proxy.conf).
   *
   * @param socket the Unix socket the gateway listens on in relay mode (unused in direct mode)
   */
  public static Map<String, String> translate(
      Properties proxy, ShimSettings shim, Set<String> gatewayKeys, Path socket)
      throws ShimConfigException {
    Map<String, String> out = new LinkedHashMap<>();
    for (String key : gatewayKeys) {
      String value = proxy.getProperty(key);
      if (value != null) {
        out.put(key, checked(key, value.trim()));
      }
    }
    boolean tlsToBrokers = Boolean.parseBoolean(ShimSettings.value(proxy, "tlsEnabledWithBroker", "false"));
    if (tlsToBrokers) {
      // The proxy keeps its TLS broker URLs in keys of their own; so does its web service URL.
      preferNonEmpty(out, "brokerServiceURL", ShimSettings.value(proxy, "brokerServiceURLTLS", ""));
      preferNonEmpty(
          out, "brokerWebServiceURL", ShimSettings.value(proxy, "brokerWebServiceURLTLS", ""));
    }
    require(out, "brokerServiceURL", "the gateway reaches the brokers through it (it cannot use "
        + "the proxy's broker discovery through the metadata store)");
    require(out, "brokerWebServiceURL", "the gateway creates topics and subscriptions through "
        + "the brokers' admin API");
    if (out.getOrDefault("configurationStoreServers", "").isEmpty()) {
      // Pulsar's newer names for the same ZooKeeper (the gateway accepts the zk: prefix).
      for (String alias : new String[] {"configurationMetadataStoreUrl", "metadataStoreUrl"}) {
        String value = ShimSettings.value(proxy, alias, "");
        if (!value.isEmpty()) {
          out.put("configurationStoreServers", checked(alias, value));
          break;
        }
      }
    }
    require(out, "configurationStoreServers", "the gateway keeps the AMQP metadata in ZooKeeper "
        + "(configurationMetadataStoreUrl=zk:host:2181 is accepted too)");
    if (AUTHENTICATION_DISABLED.equals(out.get("brokerClientAuthenticationPlugin"))) {
      out.remove("brokerClientAuthenticationPlugin");
    }
    if (shim.mode() == ShimSettings.Mode.RELAY) {
      // The gateway sees only the relay's socket: the proxy's listeners are checked here.
      List<AmqpListener> open = openRemoteListeners(out, shim.listeners());
      if (!open.isEmpty() && !isTrue(out.get("amqpAllowUnauthenticatedRemote"))) {
        throw new ShimConfigException(
            "amqpListeners: " + open.get(0).url() + " is reachable from other machines and "
                + "authenticationEnabled is false, which lets anyone in with any credentials: set "
                + "authenticationEnabled=true, listen on 127.0.0.1 only, or set "
                + "amqpAllowUnauthenticatedRemote=true");
      }
      // The proxy's own TLS listener settings (often a JKS key store, which the gateway cannot
      // read) mean nothing to a gateway that serves only the relay's plaintext Unix socket.
      LISTENER_TLS_KEYS.forEach(out::remove);
      // The gateway listens only on the relay's Unix socket, and believes its PROXY headers.
      out.put("amqpListeners", "amqp+unix://" + socket);
      out.put("amqpProxyProtocolTrustedNetworks", "unix");
    }
    return out;
  }

  /**
   * The listeners other machines reach while any credentials are accepted (authenticationEnabled
   * is false): what amqpAllowUnauthenticatedRemote must allow, as the gateway rules for its own
   * listeners (gateway/config/loading.py); RabbitMQ lets its default user in from loopback only.
   */
  public static List<AmqpListener> openRemoteListeners(
      Map<String, String> gateway, List<AmqpListener> listeners) {
    if (isTrue(gateway.get("authenticationEnabled"))) {
      return List.of();
    }
    return listeners.stream().filter(listener -> !listener.local()).toList();
  }

  private static boolean isTrue(String value) {
    return value != null && value.trim().equalsIgnoreCase("true");
  }

  /** The file the gateway reads ({@code -c}): one key=value per line. */
  public static String render(Map<String, String> config) {
    StringBuilder text =
        new StringBuilder(
            "# Written by the Starlight for RabbitMQ proxy extension from proxy.conf; "
                + "rewritten at every start.\n");
    config.forEach((key, value) -> text.append(key).append('=').append(value).append('\n'));
    return text.toString();
  }

  private static void preferNonEmpty(Map<String, String> out, String key, String value)
      throws ShimConfigException {
    if (!value.isEmpty()) {
      out.put(key, checked(key, value));
    }
  }

  private static void require(Map<String, String> out, String key, String why)
      throws ShimConfigException {
    if (out.getOrDefault(key, "").isEmpty()) {
      throw new ShimConfigException(key + ": not set in proxy.conf; " + why);
    }
  }

  /** A value the gateway's key=value reader reads back unchanged: one line, no continuation. */
  private static String checked(String key, String value) throws ShimConfigException {
    if (value.indexOf('\n') >= 0 || value.indexOf('\r') >= 0) {
      throw new ShimConfigException(key + ": a value spanning lines cannot be passed to the gateway");
    }
    int backslashes = 0;
    for (int i = value.length() - 1; i >= 0 && value.charAt(i) == '\\'; i--) {
      backslashes++;
    }
    if (backslashes % 2 == 1) {
      throw new ShimConfigException(
          key + ": a value ending in a backslash would continue on the next line of the gateway's configuration");
    }
    return value;
  }
}
