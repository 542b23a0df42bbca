/*
 * LockPeer: a small Apache Curator client that the interoperability tests
 * (test/test_interop.py) drive line by line over stdin/stdout, so that a
 * real Curator InterProcessMutex / InterProcessReadWriteLock contends with
 * zklock for the same ZooKeeper lock.
 *
 *   java -cp <curator jars>:<dir> LockPeer <connect string> <session timeout ms> [identity]
 *
 * Prints "ready <session id in hex>" once connected, then answers one line
 * per command:
 *
 *   acquire mutex|write|read|semaphore:<N> <lock path> <timeout ms>
 *       a new InterProcessMutex, or the write or read side of a new
 *       InterProcessReadWriteLock, or a lease of a new
 *       InterProcessSemaphoreV2 of N leases, on <lock path>; blocks until
 *       acquired (timeout < 0: no timeout).
 *       -> "acquired <lock node path>" (a lease: its node name) or "timeout"
 *   acquire-revocable mutex|write|read <lock path> <timeout ms>
 *       the same lock made revocable (InterProcessMutex.makeRevocable:
 *       its node is created with empty data, and a request written into
 *       it, "__REVOKE__", calls the listener).  The listener only hands
 *       the request to the main thread, which releases that lock and
 *       answers "revoked released" -- unasked, as Curator's own test does.
 *       -> "acquired <lock node path>" or "timeout"
 *   release             releases the most recently acquired lock or lease
 *       -> "released"
 *   quit                closes the ZooKeeper session at once, even while an
 *                       acquire blocks (so every node of this peer is gone
 *                       when "bye" is printed), and exits; end of input
 *                       does the same
 *       -> "bye"
 *
 * A failure answers "error <exception>" and the peer keeps serving.  Locks
 * are taken and released on the main thread (Curator's locks belong to the
 * thread that acquired them); a second thread reads the commands, so that
 * "quit" is obeyed while the main thread waits for a lock.  Lock nodes carry
 * <identity> (UTF-8) as their data, so zk_lock_queue shows who this peer is.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;

public final class LockPeer
{
    private static PrintStream out;
    private static CuratorFramework client;
    /* the revocable lock whose holder was asked to give it back */
    private static volatile InterProcessMutex revocable;

    private static synchronized void answer(String line)
    {
        out.println(line);
        out.flush();
    }

    /* quit or end of input: close the session (ZooKeeper deletes this
     * peer's ephemeral nodes right away), say so, exit. */
    private static synchronized void shutdown()
    {
        try
        {
            client.close();
        }
        finally
        {
            answer("bye");
            System.exit(0);
        }
    }

    /* The node a held lock created (InterProcessMutex.getLockPath is
     * protected; ReadLock and WriteLock are InterProcessMutex too). */
    private static String nodeOf(InterProcessMutex lock) throws Exception
    {
        Method m = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        m.setAccessible(true);
        return String.valueOf(m.invoke(lock));
    }

    public static void main(String[] args) throws Exception
    {
        out = new PrintStream(System.out, true, "UTF-8");
        if (args.length < 2)
        {
            System.err.println("usage: LockPeer <connect string> <session timeout ms> [identity]");
            System.exit(2);
        }
        String identity = args.length > 2 ? args[2] : "curator-lockpeer";
        client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(Integer.parseInt(args[1]))
            .connectionTimeoutMs(Math.min(15000, Integer.parseInt(args[1])))
            .retryPolicy(new RetryNTimes(3, 500))
            .defaultData(identity.getBytes(StandardCharsets.UTF_8))
            .build();
        client.start();
        /* SIGTERM too closes the session rather than leaving it to expire */
        Runtime.getRuntime().addShutdownHook(new Thread(() -> client.close()));
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS))
        {
            answer("error could not connect to " + args[0]);
            client.close();
            System.exit(1);
        }
        long sessionId = client.getZookeeperClient().getZooKeeper().getSessionId();
        answer("ready 0x" + Long.toHexString(sessionId));

        BlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try
            {
                BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8));
                String l;
                while ((l = in.readLine()) != null && !l.trim().equals("quit"))
                    commands.put(l);
            }
            catch (Exception e)
            {
                System.err.println("LockPeer: reading commands: " + e);
            }
            shutdown();
        }, "LockPeer-commands");
        reader.setDaemon(true);
        reader.start();

        /* InterProcessMutex or Lease, most recent first */
        Deque<Object> held = new ArrayDeque<>();
        while (true)
        {
            String line = commands.take();
            String[] w = line.trim().split("\\s+");
            if (w.length == 0 || w[0].isEmpty())
                continue;
            try
            {
                if (w[0].equals("acquire") && w.length == 4 &&
                    w[1].startsWith("semaphore:"))
                {
                    int max = Integer.parseInt(w[1].substring("semaphore:".length()));
                    InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(client, w[2], max);
                    long ms = Long.parseLong(w[3]);
                    Lease lease = ms < 0 ? sem.acquire() :
                        sem.acquire(ms, TimeUnit.MILLISECONDS);
                    if (lease != null)
                    {
                        held.push(lease);
                        answer("acquired " + lease.getNodeName());
                    }
                    else
                        answer("timeout");
                }
                else if (w[0].equals("__revoked__"))
                {
                    /* from the revocation listener (Curator's thread) */
                    if (revocable != null && held.remove(revocable))
                    {
                        revocable.release();
                        revocable = null;
                        answer("revoked released");
                    }
                }
                else if ((w[0].equals("acquire") ||
                          w[0].equals("acquire-revocable")) && w.length == 4)
                {
                    InterProcessMutex lock;
                    switch (w[1])
                    {
                        case "mutex":
                            lock = new InterProcessMutex(client, w[2]);
                            break;
                        case "write":
                            lock = new InterProcessReadWriteLock(client, w[2]).writeLock();
                            break;
                        case "read":
                            lock = new InterProcessReadWriteLock(client, w[2]).readLock();
                            break;
                        default:
                            answer("error unknown lock kind " + w[1]);
                            continue;
                    }
                    if (w[0].equals("acquire-revocable"))
                    {
                        final InterProcessMutex mine = lock;
                        lock.makeRevocable(forLock -> {
                            revocable = mine;
                            commands.offer("__revoked__");
                        });
                    }
                    long ms = Long.parseLong(w[3]);
                    boolean got;
                    if (ms < 0)
                    {
                        lock.acquire();
                        got = true;
                    }
                    else
                        got = lock.acquire(ms, TimeUnit.MILLISECONDS);
                    if (got)
                    {
                        held.push(lock);
                        answer("acquired " + nodeOf(lock));
                    }
                    else
                        answer("timeout");
                }
                else if (w[0].equals("release") && w.length == 1)
                {
                    if (held.isEmpty())
                        answer("error nothing held");
                    else
                    {
                        Object h = held.pop();
                        if (h instanceof Lease)
                            ((Lease) h).close();
                        else
                            ((InterProcessMutex) h).release();
                        answer("released");
                    }
                }
                else
                    answer("error unknown command: " + line.trim());
            }
            catch (Exception e)
            {
                answer("error " + e.toString().replace('\n', ' '));
            }
        }
    }
}
