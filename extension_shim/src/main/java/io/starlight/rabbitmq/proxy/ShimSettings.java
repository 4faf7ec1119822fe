package io.starlight.rabbitmq.proxy;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Properties;

/**
 * The extension's own keys in proxy.conf (none of them is passed to the gateway). Every one is
 * optional: the reference's quick start (proxyExtensions, proxyExtensionsDirectory, amqpListeners)
 * is enough.
 */
public record ShimSettings(
    Mode mode,
    List<String> command,
    List<AmqpListener> listeners,
    long startTimeoutMs,
    long stopTimeoutMs,
    long restartMaxDelayMs,
    String logLevel,
    Path workDirectory) {

  /** relay: the proxy binds amqpListeners and relays to the gateway; direct: the gateway binds. */
  public enum Mode {
    RELAY,
    DIRECT
  }

  public static final String MODE = "amqpProxyMode";
  public static final String COMMAND = "amqpGatewayCommand";
  public static final String START_TIMEOUT = "amqpGatewayStartTimeoutMs";
  public static final String STOP_TIMEOUT = "amqpGatewayStopTimeoutMs";
  public static final String RESTART_MAX_DELAY = "amqpGatewayRestartMaxDelayMs";
  public static final String LOG_LEVEL = "amqpGatewayLogLevel";
  public static final String WORK_DIRECTORY = "amqpGatewayWorkDirectory";
  /** Every key that belongs to the extension, not to the gateway. */
  public static final List<String> KEYS =
      List.of(MODE, COMMAND, START_TIMEOUT, STOP_TIMEOUT, RESTART_MAX_DELAY, LOG_LEVEL, WORK_DIRECTORY);

  public static final String DEFAULT_COMMAND = "starlight-rabbitmq";
  public static final String DEFAULT_LISTENERS = "amqp://127.0.0.1:5672";

  public static ShimSettings from(Properties proxy) throws ShimConfigException {
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
    return new ShimSettings(
        mode,
        List.copyOf(command),
        List.copyOf(listeners),
        millis(proxy, START_TIMEOUT, 120_000),
        millis(proxy, STOP_TIMEOUT, 15_000),
        millis(proxy, RESTART_MAX_DELAY, 30_000),
        logLevel,
        work.isEmpty() ? null : Path.of(work));
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
