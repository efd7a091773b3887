//! The lab's own check of a cell's answer, made once before its round:
//! one request, checked against the data set (the transport, the users
//! asked, the orders counted). Its length is what the load generator holds
//! every answer of the round to, instead of parsing bodies on its own CPU.

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::measure::cell::{Cell, K6_GRPC_DIRECT};
use crate::measure::services::Running;

/// The users of one request: 0 for one user's orders (k6's `USERS`), else how many.
pub(super) fn many_users(cell: &Cell) -> u32 {
    if cell.users > 1 { cell.users } else { 0 }
}

/// The data set's other users 1..=n, as k6's `USERS=n` asks for them.
fn other_users(n: u32) -> Vec<String> {
    (1..=n)
        .map(|i| dataset::other_user_id(i).to_string())
        .collect()
}

/// The orders a good answer holds: the fixed user's, or the sum over the
/// other users asked of their first `orders`, from the data set.
fn orders_in_answer(cell: &Cell) -> usize {
    if many_users(cell) == 0 {
        return cell.orders as usize;
    }
    let counts: std::collections::HashMap<_, _> = dataset::users()
        .into_iter()
        .map(|u| (u.id, u.order_count))
        .collect();
    (1..=cell.users)
        .map(|i| {
            let have = counts.get(&dataset::other_user_id(i)).copied().unwrap_or(0);
            have.min(cell.orders.max(1)) as usize
        })
        .sum()
}

/// The request of a cell, path and query: one user's orders
/// (`/v1/users/{id}/orders`), or the first orders of the data set's other
/// users (`/v1/orders?users=…`), over the cell's transport, with its
/// fields.
pub(super) fn request_path(cell: &Cell) -> String {
    let mut path = if many_users(cell) == 0 {
        format!(
            "/v1/users/{}/orders?limit={}&via={}",
            crate::measure::cell::fixed_user(cell.orders),
            cell.orders.max(1),
            cell.via
        )
    } else {
        format!(
            "/v1/orders?users={}&limit={}&via={}&batch={}",
            other_users(cell.users).join(","),
            cell.orders.max(1),
            cell.via,
            cell.batch
        )
    };
    if let Some(f) = &cell.fields {
        path.push_str(&format!("&fields={f}"));
    }
    path
}

/// The Content-Length of a good answer of the cell, from one answer the lab
/// asks for and checks itself before the round: a 200 over the transport
/// asked for, whose JSON holds exactly the fixed user's orders (parsed and
/// counted here, against the data set). The load generator then holds
/// every answer to that length instead of parsing bodies on its own CPU.
/// `None` for cells k6 sends straight to order-service.
pub(super) fn expected_length(cell: &Cell, running: &Running) -> anyhow::Result<Option<String>> {
    if cell.via == K6_GRPC_DIRECT {
        return Ok(None);
    }
    let path = request_path(cell);
    let what = format!("the lab's own check of {}", cell.label());
    let r = crate::measure::http::get(running.user_rest_addr()?, &path, Duration::from_secs(30))
        .with_context(|| what.clone())?;
    if r.status != 200 || r.header("x-via") != Some(cell.via.as_str()) {
        bail!(
            "{what}: user-service answered {} over {:?}: {}",
            r.status,
            r.header("x-via"),
            String::from_utf8_lossy(&r.body)
        );
    }
    let body: serde_json::Value =
        serde_json::from_slice(&r.body).with_context(|| format!("{what}: not JSON"))?;
    let orders = if many_users(cell) == 0 {
        body.get("orders")
            .and_then(serde_json::Value::as_array)
            .map(Vec::len)
            .with_context(|| format!("{what}: no orders array"))?
    } else {
        let calls = if cell.batch { 1 } else { cell.users };
        if r.header("x-upstream-calls") != Some(calls.to_string().as_str()) {
            bail!(
                "{what}: {:?} calls to order-service, {calls} expected",
                r.header("x-upstream-calls")
            );
        }
        let lookups = body
            .get("lookups")
            .and_then(serde_json::Value::as_array)
            .with_context(|| format!("{what}: no lookups array"))?;
        let named: Vec<&str> = lookups
            .iter()
            .filter_map(|l| l.get("user_id").and_then(serde_json::Value::as_str))
            .collect();
        if named != other_users(cell.users) {
            bail!("{what}: the answer names other users than those asked, or in another order");
        }
        lookups
            .iter()
            .filter_map(|l| l.get("orders").and_then(serde_json::Value::as_array))
            .map(Vec::len)
            .sum()
    };
    let want = orders_in_answer(cell);
    if orders != want {
        bail!("{what}: {orders} orders, {want} expected");
    }
    let len = r
        .header("content-length")
        .with_context(|| format!("{what}: no Content-Length"))?;
    Ok(Some(len.to_owned()))
}
