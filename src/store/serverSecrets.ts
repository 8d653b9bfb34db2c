/**
 * Values the server makes for itself, kept in the database (server_secrets) so every process and
 * restart shares them: the key that signs image links, and the check value of the key that
 * seals webhook secrets (core/webhooksKeyCheck).
 */
import { randomBytes } from "node:crypto";
import type { SqlQueries } from "./sql";

export class ServerSecretStore {
  constructor(private readonly sql: SqlQueries) {}

  /** The named secret, created (32 random bytes) on first use; two processes racing agree on one. */
  getOrCreate(name: string, now: number): Promise<Uint8Array> {
    return this.claim(name, randomBytes(32), now);
  }

  /** The named value; `value` is stored first unless one is already (two processes racing agree on one). */
  async claim(name: string, value: Uint8Array, now: number): Promise<Uint8Array> {
    await this.sql.run("INSERT INTO server_secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING", [name, value, now]);
    const stored = await this.read(name);
    if (!stored) throw new Error(`server secret ${name} is missing`);
    return stored;
  }

  /** The named value, or null when none is stored. */
  async read(name: string): Promise<Uint8Array | null> {
    const row = await this.sql.get<{ value: Uint8Array }>("SELECT value FROM server_secrets WHERE name = ?", [name]);
    return row ? new Uint8Array(row.value) : null;
  }

  async remove(name: string): Promise<void> {
    await this.sql.run("DELETE FROM server_secrets WHERE name = ?", [name]);
  }
}
