package io.starlight.rabbitmq.proxy;

/** A configuration the extension cannot run with; the message is one line naming the key. */
public final class ShimConfigException extends Exception {
  private static final long serialVersionUID = 1L;

  public ShimConfigException(String message) {
    super(message);
  }
}
