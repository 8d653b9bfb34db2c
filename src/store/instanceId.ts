import { newId } from "../core/ids";

/** A fresh id for an instance without a configured one ([instance] id). */
export function newInstanceId(): string {
  return newId("inst_", 16);
}
