// What the Node interop clients share: where proto/ is, the one JSON form
// of an order that the Rust tests compare with the data set, and printing
// the answer. Every client prints exactly one JSON object on stdout; the
// Rust test that ran it decides what is right. Nothing here asserts.

import { fileURLToPath } from "node:url";

/** proto/ of this checkout. */
export const PROTO_DIR = fileURLToPath(new URL("../../proto/", import.meta.url));

/** The data set's fixed user with `count` orders: its id's last digits spell the count. */
export function user(count) {
  return `00000000-0000-0000-0000-${String(count).padStart(12, "0")}`;
}

const num = (v) => (v === undefined || v === null ? 0 : Number(v));
const str = (v) => (v === undefined || v === null ? "" : String(v));
const opt = (v) => (v === undefined || v === null ? null : String(v));
const time = (t) => (t ? [num(t.seconds), num(t.nanos)] : [0, 0]);

/**
 * Every field of an order.v2.Order as the client decoded it, whatever its
 * runtime's shape (grpc-js's plain objects with string longs and enum
 * names, protobuf-es's messages with bigints and enum numbers): an absent
 * field reads as proto3's default, an absent optional as null.
 * `statusName` turns the client's enum value into its name.
 */
export function orderJson(o, statusName) {
  const a = o.shippingAddress ?? o.shipping_address ?? {};
  return {
    id: str(o.id),
    user_id: str(o.userId ?? o.user_id),
    product_id: str(o.productId ?? o.product_id),
    product_name: str(o.productName ?? o.product_name),
    quantity: num(o.quantity),
    unit_price_minor: num(o.unitPriceMinor ?? o.unit_price_minor),
    discount_minor: num(o.discountMinor ?? o.discount_minor),
    total_minor: num(o.totalMinor ?? o.total_minor),
    currency: str(o.currency),
    status: statusName(o.status),
    gift: Boolean(o.gift),
    shipping_address: {
      line1: str(a.line1),
      line2: opt(a.line2),
      city: str(a.city),
      postal_code: str(a.postalCode ?? a.postal_code),
      country_code: str(a.countryCode ?? a.country_code),
    },
    note: opt(o.note),
    coupon_code: opt(o.couponCode ?? o.coupon_code),
    created_at: time(o.createdAt ?? o.created_at),
    updated_at: time(o.updatedAt ?? o.updated_at),
  };
}

/** Prints the answer and ends the process (open HTTP/2 sessions included). */
export function emit(out) {
  process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
}
