/*
 * Apache Curator's InterProcessMutex and InterProcessSemaphoreV2, measured
 * for `make bench`.
 *
 *   java -cp <build>:/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar \
 *        CuratorBench HOSTS PATH CLIENTS WARMUP_S SECONDS [MODE [LEASES]]
 *
 * CLIENTS threads, each with its own CuratorFramework (its own ZooKeeper
 * session) and its own recipe object on PATH.  After WARMUP_S seconds
 * (JIT, sessions, caches) the cycles are counted for SECONDS.  MODE:
 *
 *   mutex      (default) InterProcessMutex, acquire()+release() loop.  With
 *              one client this is the uncontended cycle; with more, every
 *              release hands the lock to the next waiter.
 *   latency    the same loop, and every thread records System.nanoTime()
 *              after acquire() returns, at the release() call and after
 *              release() returns.  The grants in the window, ordered by
 *              acquire time (the mutex serialises them), give the handoff
 *              latency of each consecutive pair: from holder i's release()
 *              call (the delete is sent then) to holder i+1's acquire()
 *              return, and from holder i's release() return.  Prints their
 *              median and p99 (nearest rank) in microseconds.
 *   semaphore  InterProcessSemaphoreV2 with LEASES (default 3) leases,
 *              acquire()+returnLease() loop; a cycle is an acquisition.
 *   tail       the mutex loop; every cycle started inside the window is
 *              written to the file named by BENCH_TAIL_FILE as a line
 *              "START_NS END_NS" (System.nanoTime(), CLOCK_MONOTONIC:
 *              before acquire() and after release() returns), and the
 *              sessions' reconnects (RECONNECTED and LOST states) are
 *              counted: adds reconnects= to the line.
 *   wait       what waiting costs (issue 38, bench/waitcost_part.py): no
 *              loop.  CLIENTS = K + 1 sessions (each its own
 *              CuratorFramework, as in every mode) connect and the program
 *              prints "connected", then waits for a line on stdin ("go",
 *              within 600 s): client 0 acquires the InterProcessMutex and
 *              holds it, the K others call acquire(SECONDS, s) on it, one
 *              thread each, and "waiting" is printed once every acquire()
 *              has been called (the caller counts the queue's nodes).  The
 *              next line on stdin (or its end, or 600 s) stops them: the
 *              waiters' threads are interrupted (acquire() deletes its node
 *              and throws), the holder releases, every client is closed,
 *              and one line is printed: clients=N waited=K granted=G
 *              (G: waiters granted before the stop, 0 when all went well).
 *              WARMUP_S is ignored.
 *
 * Prints one line:
 *   clients=16 cycles=12345 total=15000 seconds=5.000 per_second=2469.0 us_per_cycle=405.0
 * (cycles: in the measured window; total: warm-up included; the latency
 * mode adds handoffs= lat_call_p50_us= lat_call_p99_us= lat_ret_p50_us=
 * lat_ret_p99_us=), after "window-start" and "window-end" lines that mark
 * the window.
 */
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    static final int MAX_RECORDS = 1 << 17;     // per thread, latency mode

    /* nearest-rank percentile of a sorted array */
    static long pct(long[] sorted, double p) {
        if (sorted.length == 0)
            return 0;
        int k = (int) Math.ceil(p * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, k))];
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5 || args.length > 7) {
            System.err.println("usage: CuratorBench HOSTS PATH CLIENTS WARMUP_S SECONDS "
                               + "[mutex|latency|tail|semaphore [LEASES]|wait]");
            System.exit(2);
        }
        final String hosts = args[0];
        final String path = args[1];
        final int n = Integer.parseInt(args[2]);
        final double warmup = Double.parseDouble(args[3]);
        final double seconds = Double.parseDouble(args[4]);
        final String mode = args.length > 5 ? args[5] : "mutex";
        final int leases = args.length > 6 ? Integer.parseInt(args[6]) : 3;
        final boolean latency = mode.equals("latency");
        final boolean tail = mode.equals("tail");
        if (mode.equals("wait")) {
            waitMode(hosts, path, n, seconds);
            return;
        }
        if (!mode.equals("mutex") && !latency && !tail && !mode.equals("semaphore")) {
            System.err.println("CuratorBench: unknown mode " + mode);
            System.exit(2);
        }

        final AtomicLong releases = new AtomicLong();
        final AtomicBoolean stop = new AtomicBoolean();
        final AtomicLong errors = new AtomicLong();
        final AtomicLong reconnects = new AtomicLong();
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
            c.getConnectionStateListenable().addListener((cf, st) -> {
                if (st == ConnectionState.RECONNECTED || st == ConnectionState.LOST)
                    reconnects.incrementAndGet();
            });
            clients.add(c);
        }

        // latency mode: per thread, [acquired, release call, release return]
        final long[][] rec = new long[latency || tail ? n : 0][];
        final int[] nrec = new int[n];
        final CountDownLatch ready = new CountDownLatch(n);
        final CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final int id = i;
            final CuratorFramework client = clients.get(i);
            if (latency || tail)
                rec[i] = new long[3 * MAX_RECORDS];
            Thread t = new Thread(() -> {
                ready.countDown();
                try {
                    go.await();
                    if (mode.equals("semaphore")) {
                        InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, path, leases);
                        while (!stop.get()) {
                            Lease lease = sem.acquire();
                            sem.returnLease(lease);
                            releases.incrementAndGet();
                        }
                        return;
                    }
                    InterProcessMutex mutex = new InterProcessMutex(client, path);
                    while (!stop.get()) {
                        long s = System.nanoTime();
                        mutex.acquire();
                        if (tail) {
                            mutex.release();
                            long e = System.nanoTime();
                            int k = nrec[id];
                            if (k < MAX_RECORDS) {
                                rec[id][3 * k] = s;
                                rec[id][3 * k + 1] = e;
                                nrec[id] = k + 1;
                            }
                        } else if (latency) {
                            long a = System.nanoTime();
                            long c = System.nanoTime();
                            mutex.release();
                            long r = System.nanoTime();
                            int k = nrec[id];
                            if (k < MAX_RECORDS) {
                                rec[id][3 * k] = a;
                                rec[id][3 * k + 1] = c;
                                rec[id][3 * k + 2] = r;
                                nrec[id] = k + 1;
                            }
                        } else
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
        final long reconnectsInLoop = reconnects.get();     // before close()
        for (CuratorFramework c : clients)
            c.close();
        if (errors.get() > 0) {
            System.err.println("CuratorBench: " + errors.get() + " client(s) failed");
            System.exit(1);
        }
        double secs = (t1 - t0) / 1e9;
        long cycles = c1 - c0;
        String extra = "";
        if (tail) {
            try (java.io.PrintWriter w = new java.io.PrintWriter(
                     new java.io.BufferedWriter(new java.io.FileWriter(System.getenv("BENCH_TAIL_FILE"))))) {
                for (int i = 0; i < n; i++)
                    for (int k = 0; k < nrec[i]; k++)
                        if (rec[i][3 * k] >= t0 && rec[i][3 * k] <= t1)
                            w.println(rec[i][3 * k] + " " + rec[i][3 * k + 1]);
            }
            extra = " reconnects=" + reconnectsInLoop;
        }
        if (latency) {
            // the grants acquired inside the window, in acquire order
            List<long[]> g = new ArrayList<>();
            for (int i = 0; i < n; i++)
                for (int k = 0; k < nrec[i]; k++)
                    if (rec[i][3 * k] >= t0 && rec[i][3 * k] <= t1)
                        g.add(new long[] {rec[i][3 * k], rec[i][3 * k + 1], rec[i][3 * k + 2]});
            g.sort((x, y) -> Long.compare(x[0], y[0]));
            int m = Math.max(0, g.size() - 1);
            long[] fromCall = new long[m], fromRet = new long[m];
            int bad = 0;
            for (int k = 0; k < m; k++) {
                fromCall[k] = g.get(k + 1)[0] - g.get(k)[1];
                fromRet[k] = g.get(k + 1)[0] - g.get(k)[2];
                if (g.get(k + 1)[0] < g.get(k)[1])
                    bad++;          // granted before the previous release: overlap
            }
            Arrays.sort(fromCall);
            Arrays.sort(fromRet);
            extra = String.format(" handoffs=%d overlaps=%d lat_call_p50_us=%.1f lat_call_p99_us=%.1f"
                                  + " lat_ret_p50_us=%.1f lat_ret_p99_us=%.1f",
                                  m, bad, pct(fromCall, 0.5) / 1e3, pct(fromCall, 0.99) / 1e3,
                                  pct(fromRet, 0.5) / 1e3, pct(fromRet, 0.99) / 1e3);
        }
        System.out.printf("clients=%d cycles=%d total=%d seconds=%.3f per_second=%.1f us_per_cycle=%.1f%s%n",
                          n, cycles, releases.get(), secs, cycles / secs,
                          cycles > 0 ? 1e6 * secs / cycles : 0.0, extra);
        System.exit(0);
    }

    /* one line of stdin, or null at its end or after timeoutMs */
    static String readLine(java.io.BufferedReader in, long timeoutMs) throws Exception {
        final String[] got = new String[1];
        Thread t = new Thread(() -> {
            try {
                got[0] = in.readLine();
            } catch (java.io.IOException e) {
                got[0] = null;
            }
        });
        t.setDaemon(true);
        t.start();
        t.join(timeoutMs);
        return got[0];
    }

    /* the wait mode (see the head comment) */
    static void waitMode(String hosts, String path, int n, double seconds) throws Exception {
        final java.io.BufferedReader in =
            new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
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
        System.out.println("connected");
        System.out.flush();
        readLine(in, 600000);
        InterProcessMutex holder = new InterProcessMutex(clients.get(0), path);
        holder.acquire();
        final AtomicLong granted = new AtomicLong();
        final AtomicLong errors = new AtomicLong();
        final CountDownLatch called = new CountDownLatch(n - 1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 1; i < n; i++) {
            final InterProcessMutex m = new InterProcessMutex(clients.get(i), path);
            Thread t = new Thread(() -> {
                called.countDown();
                try {
                    if (m.acquire((long) (seconds * 1000), TimeUnit.MILLISECONDS)) {
                        granted.incrementAndGet();
                        m.release();
                    }
                } catch (InterruptedException e) {
                    // the stop: acquire() deleted the waiter's node
                } catch (Exception e) {
                    if (!(e.getCause() instanceof InterruptedException)) {
                        errors.incrementAndGet();
                        e.printStackTrace();
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        called.await(60, TimeUnit.SECONDS);
        System.out.println("waiting");
        System.out.flush();
        readLine(in, 600000);
        for (Thread t : threads)
            t.interrupt();
        for (Thread t : threads)
            t.join(20000);
        holder.release();
        for (CuratorFramework c : clients)
            c.close();
        System.out.println("clients=" + n + " waited=" + (n - 1) + " granted=" + granted.get()
                           + " errors=" + errors.get());
        System.out.flush();
        System.exit(errors.get() > 0 ? 1 : 0);
    }
}
