package io.starlight.rabbitmq.proxy;

import io.netty.bootstrap.Bootstrap;
import io.netty.buffer.Unpooled;
import io.netty.channel.Channel;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoop;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollDomainSocketChannel;
import io.netty.channel.epoll.EpollEventLoopGroup;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.unix.DomainSocketAddress;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Relays each AMQP connection the proxy accepts to the gateway's Unix socket, byte for byte,
 * after a PROXY protocol v2 header naming the client. Back-pressure: a side stops reading while
 * the other side's outbound buffer is full (Netty's writability), so a slow client never makes
 * the proxy buffer without bound.
 *
 * <p>The gateway connection runs on the client connection's own event loop when that loop can
 * open Unix sockets (epoll, the proxy's default on Linux); otherwise on a small epoll group of
 * the relay's own.
 */
final class Relay extends ChannelInitializer<SocketChannel> {
  private static final Logger LOG = LoggerFactory.getLogger(Relay.class);
  /** At most one "gateway unreachable" warning per this many ms (clients retry in loops). */
  private static final long WARN_INTERVAL_MS = 5_000;

  private final DomainSocketAddress gateway;
  private final String whyUnreachable;
  private final AtomicLong lastWarning = new AtomicLong();
  private EventLoopGroup ownGroup; // only when the proxy's loops are not epoll

  Relay(Path socket, String whyUnreachable) {
    this.gateway = new DomainSocketAddress(socket.toString());
    this.whyUnreachable = whyUnreachable;
  }

  /** Whether relaying can work here: Netty's epoll transport (Linux) opens the Unix sockets. */
  static String unavailableReason() {
    return Epoll.isAvailable() ? null : "Netty's epoll transport is not available (" + Epoll.unavailabilityCause() + ")";
  }

  @Override
  protected void initChannel(SocketChannel client) {
    client.config().setAutoRead(false); // nothing is read before the gateway connection exists
    client.pipeline().addLast("starlight-rabbitmq-relay", new ClientSide());
  }

  void close() {
    synchronized (this) {
      if (ownGroup != null) {
        ownGroup.shutdownGracefully(0, 1, TimeUnit.SECONDS);
      }
    }
  }

  private EventLoop loopFor(Channel client) {
    if (client.eventLoop().parent() instanceof EpollEventLoopGroup) {
      return client.eventLoop();
    }
    synchronized (this) {
      if (ownGroup == null) {
        ownGroup = new EpollEventLoopGroup(1);
      }
      return ownGroup.next();
    }
  }

  private final class ClientSide extends ChannelInboundHandlerAdapter {
    private Channel backend;

    @Override
    public void channelActive(ChannelHandlerContext ctx) {
      Channel client = ctx.channel();
      Bootstrap bootstrap =
          new Bootstrap()
              .group(loopFor(client))
              .channel(EpollDomainSocketChannel.class)
              .option(ChannelOption.AUTO_READ, true)
              .handler(new GatewaySide(client));
      bootstrap
          .connect(gateway)
          .addListener(
              (ChannelFutureListener)
                  connected -> {
                    if (!connected.isSuccess()) {
                      warnUnreachable(connected.cause());
                      client.close();
                      return;
                    }
                    backend = connected.channel();
                    if (!client.isActive()) {
                      backend.close(); // the client left while we were connecting
                      return;
                    }
                    byte[] header = ProxyProtocolV2.proxy(client.remoteAddress(), client.localAddress());
                    backend.writeAndFlush(Unpooled.wrappedBuffer(header));
                    client.config().setAutoRead(true);
                  });
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) {
      backend.write(msg);
      if (!backend.isWritable()) {
        ctx.channel().config().setAutoRead(false);
      }
    }

    @Override
    public void channelReadComplete(ChannelHandlerContext ctx) {
      if (backend != null) {
        backend.flush();
      }
    }

    @Override
    public void channelWritabilityChanged(ChannelHandlerContext ctx) {
      // Towards the client: read from the gateway only while the client takes the bytes.
      if (backend != null) {
        backend.config().setAutoRead(ctx.channel().isWritable());
      }
      ctx.fireChannelWritabilityChanged();
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) {
      if (backend != null) {
        closeAfterFlush(backend);
      }
    }

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
      LOG.debug("client connection {} failed: {}", ctx.channel().remoteAddress(), cause.toString());
      closeAfterFlush(ctx.channel());
    }
  }

  private static final class GatewaySide extends ChannelInboundHandlerAdapter {
    private final Channel client;

    GatewaySide(Channel client) {
      this.client = client;
    }

    @Override
    public void channelRead(ChannelHandlerContext ctx, Object msg) {
      client.write(msg);
      if (!client.isWritable()) {
        ctx.channel().config().setAutoRead(false);
      }
    }

    @Override
    public void channelReadComplete(ChannelHandlerContext ctx) {
      client.flush();
    }

    @Override
    public void channelWritabilityChanged(ChannelHandlerContext ctx) {
      // Our outbound buffer (towards the gateway) drained or filled: the client side reads
      // only while there is room.
      client.config().setAutoRead(ctx.channel().isWritable());
      ctx.fireChannelWritabilityChanged();
    }

    @Override
    public void channelInactive(ChannelHandlerContext ctx) {
      closeAfterFlush(client);
    }

    @Override
    public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
      LOG.debug("gateway connection for {} failed: {}", client.remoteAddress(), cause.toString());
      closeAfterFlush(ctx.channel());
    }
  }

  private void warnUnreachable(Throwable cause) {
    long now = System.currentTimeMillis();
    long last = lastWarning.get();
    if (now - last >= WARN_INTERVAL_MS && lastWarning.compareAndSet(last, now)) {
      LOG.warn(
          "the gateway is not accepting connections at {} ({}): closing the client's connection; {}",
          gateway.path(),
          cause == null ? "?" : cause.getMessage(),
          whyUnreachable);
    }
  }

  private static void closeAfterFlush(Channel channel) {
    if (channel.isActive()) {
      channel.writeAndFlush(Unpooled.EMPTY_BUFFER).addListener(ChannelFutureListener.CLOSE);
    }
  }
}
