import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';

/** An event some area emitted, for webhooks and SSE fan-out. */
export interface BusEvent {
  /** Event name, e.g. `file.created`. */
  event: string;
  ownerId: string;
  timestamp: string;
  data: Record<string, unknown>;
  /**
   * Set on events recorded in the outbox (platform/outbox.ts), published once they were handed to the
   * outbox's consumer: they are already durable, so a subscriber must not persist them again.
   */
  id?: string;
}

export type BusHandler = (e: BusEvent) => void | Promise<void>;

/**
 * Publish/subscribe across the deployment. In-process by default; Redis pub/sub with REDIS_URL so
 * every replica sees every event. Events that must not be lost go through the outbox (platform/outbox.ts),
 * which publishes them here once they are durable (for live observers), so the bus persists nothing.
 */
export interface Bus {
  publish(e: Omit<BusEvent, 'timestamp'> & { timestamp?: string }): Promise<void>;
  subscribe(handler: BusHandler): () => void;
  close(): Promise<void>;
}

export class MemoryBus implements Bus {
  private readonly emitter = new EventEmitter().setMaxListeners(0);
  async publish(e: Omit<BusEvent, 'timestamp'> & { timestamp?: string }): Promise<void> {
    this.deliver({ ...e, timestamp: e.timestamp ?? new Date().toISOString() });
  }
  protected deliver(e: BusEvent): void {
    this.emitter.emit('event', e);
  }
  subscribe(handler: BusHandler): () => void {
    const h = (e: BusEvent) => {
      void Promise.resolve(handler(e)).catch(() => {});
    };
    this.emitter.on('event', h);
    return () => this.emitter.off('event', h);
  }
  async close(): Promise<void> {
    this.emitter.removeAllListeners();
  }
}

export class RedisBus extends MemoryBus {
  private static readonly CHANNEL = 'nube:events';
  constructor(
    private readonly pub: Redis,
    private readonly sub: Redis,
  ) {
    super();
    void this.sub.subscribe(RedisBus.CHANNEL);
    this.sub.on('message', (_channel: string, message: string) => {
      try {
        this.deliver(JSON.parse(message) as BusEvent);
      } catch {
        // a malformed message from another process is dropped, not fatal
      }
    });
  }
  override async publish(e: Omit<BusEvent, 'timestamp'> & { timestamp?: string }): Promise<void> {
    await this.pub.publish(RedisBus.CHANNEL, JSON.stringify({ ...e, timestamp: e.timestamp ?? new Date().toISOString() }));
  }
  override async close(): Promise<void> {
    await super.close();
    this.sub.disconnect();
  }
}
