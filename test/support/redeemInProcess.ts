/**
 * Run as its own process by test/store/redemptionRace.test.ts: opens the data directory's
 * database, waits for the shared start time, redeems one code for one user and prints the
 * outcome as JSON.  Usage: bun redeemInProcess.ts <dataDir> <userId> <code> <startAtMs>
 */
import { RedemptionCodes } from "../../src/core/redemptionCodes";
import { createStore } from "../../src/store";
import { latestVersion, openDatabase } from "../../src/store/database";

const [dataDir, userId, code, startAt] = process.argv.slice(2);
const store = createStore(openDatabase(dataDir!), latestVersion());
const codes = new RedemptionCodes(store.redemptions, Date.now);
const wait = Number(startAt) - Date.now();
if (wait > 0) await Bun.sleep(wait);
console.log(JSON.stringify(await codes.redeem(Number(userId), code!, `proc-${process.pid}`)));
await store.close();
