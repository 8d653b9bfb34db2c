/**
 * An upstream account's credentials, one rule for every upstream kind: what we send (the
 * Authorization header) and what must never come back (the secrets the redactor removes).
 *
 * The order: an `api_key` is sent as `Authorization: Bearer <key>`; else `username` and
 * `password` as HTTP basic auth; else nothing. The key comes first because it is the credential
 * issued for API access (OpenAI and its look-alikes, a proxy in front of a WebUI), while basic
 * auth is what servers with nothing else use (the WebUI's `--api-auth`). A request carries one
 * Authorization header, so an account that sets both sends only its key; startup warns about it
 * (`sendsOnlyApiKey`). One order for every kind, so an account means the same wherever it is.
 */

/** The account fields that hold credentials (the shape of [[upstreams]].accounts). */
export interface AccountCredentials {
  api_key?: string;
  username?: string;
  password?: string;
}

/** The Authorization header value for this account, or undefined when it has no credentials. */
export function authorizationFor(account: AccountCredentials): string | undefined {
  if (account.api_key) return `Bearer ${account.api_key}`;
  if (account.username !== undefined && account.password !== undefined) return `Basic ${basicToken(account.username, account.password)}`;
  return undefined;
}

/** True when the account sets both an api_key and username/password: only the key is sent. */
export function sendsOnlyApiKey(account: AccountCredentials): boolean {
  return Boolean(account.api_key) && account.username !== undefined && account.password !== undefined;
}

/**
 * Every secret of the account in the spellings we create ourselves: the key, the password, and
 * the Basic credential of username:password (the redactor adds the escaped spellings).
 */
export function accountSecrets(account: AccountCredentials): string[] {
  const secrets: string[] = [];
  if (account.api_key) secrets.push(account.api_key);
  if (account.password) {
    secrets.push(account.password);
    if (account.username !== undefined) secrets.push(...basicTokens(account.username, account.password));
  }
  return secrets;
}

/**
 * Where a kind's API expects the api_key: `authorization` (as `Bearer <key>`, the default) or
 * a header of its own that carries the bare key (Gemini's `x-goog-api-key`). Only the header
 * differs; which credential is sent follows the one rule above.
 */
export type ApiKeyHeader = "authorization" | "x-goog-api-key";

/** The credential headers of each account of one upstream, computed once. */
export class AccountAuth {
  private readonly byAccount = new Map<string, Record<string, string>>();

  constructor(accounts: Iterable<AccountCredentials & { id: string }>, keyHeader: ApiKeyHeader = "authorization") {
    for (const a of accounts) {
      if (a.api_key && keyHeader !== "authorization") {
        this.byAccount.set(a.id, { [keyHeader]: a.api_key });
        continue;
      }
      const authorization = authorizationFor(a);
      this.byAccount.set(a.id, authorization === undefined ? {} : { authorization });
    }
  }

  /** The headers that authenticate `accountId` (none for an account without credentials). */
  headersFor(accountId: string): Record<string, string> {
    return { ...this.byAccount.get(accountId) };
  }
}

/**
 * base64 of "username:password" as we send it: Latin-1 bytes (`btoa`) when every character has
 * one, which is what servers have always received from us; UTF-8 bytes otherwise (RFC 7617's
 * charset="UTF-8"), where `btoa` could not encode it at all.
 */
function basicToken(username: string, password: string): string {
  const pair = `${username}:${password}`;
  try {
    return btoa(pair);
  } catch {
    return utf8Base64(pair);
  }
}

/** Both spellings of the Basic credential, since an upstream may echo either. */
function basicTokens(username: string, password: string): string[] {
  const pair = `${username}:${password}`;
  const out = [utf8Base64(pair)];
  try {
    out.push(btoa(pair)); // differs from UTF-8 for Latin-1 characters
  } catch {
    // not Latin-1: basicToken sent the UTF-8 spelling
  }
  return out;
}

function utf8Base64(text: string): string {
  return Buffer.from(text, "utf8").toString("base64");
}
