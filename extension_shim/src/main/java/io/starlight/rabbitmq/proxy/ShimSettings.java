package io.starlight.rabbitmq.proxy;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

/**
 * The extension's own keys in proxy.conf (none of them is passed to the gateway). Every one is
 * optional: the reference's quick start (proxyExtensions, proxyExtensionsDirectory, amqpListeners)
 * is enough.
 */
public record ShimSettings(
    Mode mode,
    GatewayMode gatewayMode,
    List<String> command,
    List<AmqpListener> listeners,
    long startTimeoutMs,
    long stopTimeoutMs,
    long restartMaxDelayMs,
    String logLevel,
    Path workDirectory,
    boolean gatewayGatesProxyStatus) {

  /** relay: the proxy binds amqpListeners and relays to the gateway; direct: the gateway binds. */
  public enum Mode {
    RELAY,
    DIRECT
  }

  /**
   * child: the extension runs the gateway as its child process (the proxy's image needs Python);
   * sidecar: another container of the pod runs it, listening on the socket in the shared work
   * directory (the stock Pulsar images).
   */
  public enum GatewayMode {
    CHILD,
    SIDECAR
  }

  public static final String MODE = "amqpProxyMode";
  public static final String GATEWAY_MODE = "amqpGatewayMode";
  public static final String COMMAND = "amqpGatewayCommand";
  public static final String START_TIMEOUT = "amqpGatewayStartTimeoutMs";
  public static final String STOP_TIMEOUT = "amqpGatewayStopTimeoutMs";
  public static final String RESTART_MAX_DELAY = "amqpGatewayRestartMaxDelayMs";
  public static final String LOG_LEVEL = "amqpGatewayLogLevel";
  public static final String WORK_DIRECTORY = "amqpGatewayWorkDirectory";
  public static final String GATES_PROXY_STATUS = "amqpGatewayGatesProxyStatus";
  /** Every key that belongs to the extension, not to the gateway (docs/proxy-extension.md). */
  public static final List<String> KEYS =
      List.of(
          MODE,
          GATEWAY_MODE,
          COMMAND,
          START_TIMEOUT,
          STOP_TIMEOUT,
          RESTART_MAX_DELAY,
          LOG_LEVEL,
          WORK_DIRECTORY,
          GATES_PROXY_STATUS);
  /**
   * A proxy.conf key with one of these prefixes that is neither the extension's nor the
   * gateway's is a misspelling (amqpGatewayMod=sidecar would otherwise run a child silently).
   */
  static final List<String> OWN_PREFIXES = List.of("amqpGateway", "amqpProxy");

  public static final String DEFAULT_COMMAND = "starlight-rabbitmq";
  public static final String DEFAULT_LISTENERS = "amqp://127.0.0.1:5672";

  public static ShimSettings from(Properties proxy) throws ShimConfigException {
    return from(proxy, GatewayConfigTranslator.gatewayKeys());
  }

  public static ShimSettings from(Properties proxy, Set<String> gatewayKeys) throws ShimConfigException {
    for (String key : new TreeSet<>(proxy.stringPropertyNames())) {
      if (OWN_PREFIXES.stream().anyMatch(key::startsWith) && !KEYS.contains(key) && !gatewayKeys.contains(key)) {
        throw new ShimConfigException(
            key + ": not a key of the Starlight for RabbitMQ extension (its keys: " + String.join(", ", KEYS) + ")");
      }
    }
    GatewayMode gatewayMode =
        switch (value(proxy, GATEWAY_MODE, "child").toLowerCase(Locale.ROOT)) {
          case "child" -> GatewayMode.CHILD;
          case "sidecar" -> GatewayMode.SIDECAR;
          default -> throw new ShimConfigException(
              GATEWAY_MODE + ": must be child or sidecar, got '" + value(proxy, GATEWAY_MODE, "") + "'");
        };
    Mode mode =
        switch (value(proxy, MODE, "relay").toLowerCase(Locale.ROOT)) {
          case "relay" -> Mode.RELAY;
          case "direct" -> Mode.DIRECT;
          default -> throw new ShimConfigException(
              MODE + ": must be relay or direct, got '" + value(proxy, MODE, "") + "'");
        };
    String commandText = value(proxy, COMMAND, DEFAULT_COMMAND);
    if (commandText.isBlank()) {
      throw new ShimConfigException(COMMAND + ": is empty; leave it out to run " + DEFAULT_COMMAND);
    }
    List<String> command = Arrays.asList(commandText.trim().split("\\s+"));
    List<AmqpListener> listeners =
        AmqpListener.parseList(value(proxy, "amqpListeners", DEFAULT_LISTENERS));
    if (mode == Mode.RELAY) {
      for (AmqpListener listener : listeners) {
        if (listener.tls()) {
          throw new ShimConfigException(
              "amqpListeners: "
                  + listener.url()
                  + " is TLS, which the relay does not terminate; set "
                  + MODE
                  + "=direct (the gateway then serves TLS itself)");
        }
      }
    }
    String logLevel = value(proxy, LOG_LEVEL, "INFO").toUpperCase(Locale.ROOT);
    if (!List.of("DEBUG", "INFO", "WARNING", "ERROR").contains(logLevel)) {
      throw new ShimConfigException(LOG_LEVEL + ": must be DEBUG, INFO, WARNING or ERROR");
    }
    String work = value(proxy, WORK_DIRECTORY, "");
    if (gatewayMode == GatewayMode.SIDECAR) {
      if (mode != Mode.RELAY) {
        throw new ShimConfigException(
            MODE + ": must be relay with " + GATEWAY_MODE + "=sidecar (the sidecar gateway listens on "
                + "the shared Unix socket only; for a gateway that binds the AMQP port itself, leave "
                + "the extension out)");
      }
      if (work.isEmpty()) {
        throw new ShimConfigException(
            WORK_DIRECTORY + ": must name the directory shared with the gateway's container (e.g. an "
                + "emptyDir mounted in both) when " + GATEWAY_MODE + "=sidecar; the gateway listens on "
                + "amqp+unix://<that directory>/amqp.sock");
      }
      for (String childOnly : List.of(COMMAND, STOP_TIMEOUT, RESTART_MAX_DELAY, LOG_LEVEL)) {
        if (proxy.getProperty(childOnly) != null) {
          throw new ShimConfigException(
              childOnly + ": applies to " + GATEWAY_MODE + "=child only; the sidecar container runs "
                  + "and configures the gateway itself");
        }
      }
    }
    String gates = value(proxy, GATES_PROXY_STATUS, "true").toLowerCase(Locale.ROOT);
    if (!gates.equals("true") && !gates.equals("false")) {
      throw new ShimConfigException(GATES_PROXY_STATUS + ": must be true or false, got '" + gates + "'");
    }
    return new ShimSettings(
        mode,
        gatewayMode,
        List.copyOf(command),
        List.copyOf(listeners),
        millis(proxy, START_TIMEOUT, 120_000),
        millis(proxy, STOP_TIMEOUT, 15_000),
        millis(proxy, RESTART_MAX_DELAY, 30_000),
        logLevel,
        work.isEmpty() ? null : Path.of(work),
        gates.equals("true"));
  }

  static String value(Properties proxy, String key, String fallback) {
    String value = proxy.getProperty(key);
    return value == null ? fallback : value.trim();
  }

  private static long millis(Properties proxy, String key, long fallback) throws ShimConfigException {
    String text = value(proxy, key, "");
    if (text.isEmpty()) {
      return fallback;
    }
    try {
      long value = Long.parseLong(text);
      if (value > 0) {
        return value;
      }
    } catch (NumberFormatException ignored) {
      // reported below
    }
    throw new ShimConfigException(key + ": must be a positive number of milliseconds, got '" + text + "'");
  }
}
