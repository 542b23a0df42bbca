/*
 * Apache Curator's InterProcessMutex, measured for `make bench`.
 *
 *   java -cp <build>:/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar \
 *        CuratorBench HOSTS PATH CLIENTS WARMUP_S SECONDS
 *
 * CLIENTS threads, each with its own CuratorFramework (its own ZooKeeper
 * session) and its own InterProcessMutex on PATH, loop acquire()+release().
 * After WARMUP_S seconds (JIT, sessions, caches) the releases are counted
 * for SECONDS.  With one client this is the uncontended cycle; with more,
 * every release hands the lock to the next waiter.  Prints one line:
 *   clients=16 cycles=12345 total=15000 seconds=5.000 per_second=2469.0 us_per_cycle=405.0
 * (cycles: in the measured window; total: warm-up included), after
 * "window-start" and "window-end" lines that mark the window.
 */
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: CuratorBench HOSTS PATH CLIENTS WARMUP_S SECONDS");
            System.exit(2);
        }
        final String hosts = args[0];
        final String path = args[1];
        final int n = Integer.parseInt(args[2]);
        final double warmup = Double.parseDouble(args[3]);
        final double seconds = Double.parseDouble(args[4]);

        final AtomicLong releases = new AtomicLong();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicLong errors = new AtomicLong();
        final List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hosts)
                .sessionTimeoutMs(10000)
                .connectionTimeoutMs(15000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
            c.start();
            if (!c.blockUntilConnected(15, TimeUnit.SECONDS))
                throw new RuntimeException("no session with " + hosts);
            clients.add(c);
        }

        final CountDownLatch ready = new CountDownLatch(n);
        final CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final InterProcessMutex mutex = new InterProcessMutex(clients.get(i), path);
            Thread t = new Thread(() -> {
                ready.countDown();
                try {
                    go.await();
                    while (!stop.get()) {
                        mutex.acquire();
                        mutex.release();
                        releases.incrementAndGet();
                    }
                } catch (Exception e) {
                    errors.incrementAndGet();
                    e.printStackTrace();
                }
            });
            t.start();
            threads.add(t);
        }
        ready.await();
        go.countDown();
        Thread.sleep((long) (warmup * 1000));
        long c0 = releases.get();
        long t0 = System.nanoTime();
        System.out.println("window-start");     // for an outside CPU sampler
        System.out.flush();
        Thread.sleep((long) (seconds * 1000));
        long c1 = releases.get();
        long t1 = System.nanoTime();
        System.out.println("window-end");
        System.out.flush();
        if (System.getenv("BENCH_SAMPLER") != null)     // sampled: go on
            new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        stop.set(true);
        for (Thread t : threads)
            t.join(20000);
        for (CuratorFramework c : clients)
            c.close();
        if (errors.get() > 0) {
            System.err.println("CuratorBench: " + errors.get() + " client(s) failed");
            System.exit(1);
        }
        double secs = (t1 - t0) / 1e9;
        long cycles = c1 - c0;
        System.out.printf("clients=%d cycles=%d total=%d seconds=%.3f per_second=%.1f us_per_cycle=%.1f%n",
                          n, cycles, releases.get(), secs, cycles / secs,
                          cycles > 0 ? 1e6 * secs / cycles : 0.0);
    }
}
