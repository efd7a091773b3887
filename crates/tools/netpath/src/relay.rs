//! A TCP relay from a listener (made inside a namespace) to an address on
//! the host, two threads per connection. It ends with its [`Relay`].

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A running relay; dropping it stops accepting.
#[derive(Debug)]
pub struct Relay {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Relay {
    pub fn start(listener: TcpListener, target: SocketAddr) -> anyhow::Result<Relay> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::Builder::new()
            .name("netpath-relay".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((inside, _)) => {
                            let _ = inside.set_nonblocking(false);
                            if let Ok(outside) =
                                TcpStream::connect_timeout(&target, Duration::from_secs(5))
                            {
                                let _ = pipe(inside, outside);
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })?;
        Ok(Relay { stop, addr })
    }

    /// The address inside the namespace.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pipe(a: TcpStream, b: TcpStream) -> io::Result<()> {
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    for (mut from, mut to) in [(a.try_clone()?, b.try_clone()?), (b, a)] {
        std::thread::spawn(move || {
            let _ = io::copy(&mut from, &mut to);
            let _ = to.shutdown(Shutdown::Write);
        });
    }
    Ok(())
}
