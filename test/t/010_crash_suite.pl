# Crash suite: a shop whose order function claims the
# request key, writes the order and records the outcome in one transaction,
# under duplicate load from pgbench (16 clients, a few hot keys and many cold
# ones, wait => true and wait => false, transient and final failures, keys
# reused with another body), while the test kills backends with SIGKILL (the
# postmaster then reinitializes: every backend dies, crash recovery runs)
# and stops the server with -m immediate.  After every fault the server is
# back and the invariants hold:
#   - one order per succeeded key, and it is the order the record names;
#   - no order without a succeeded record;
#   - no committed in-transaction claim without an outcome;
#   - every answer a client got (logged in the transaction that gave it)
#     agrees with the stored record: created/replay name the stored order,
#     failed/replay_failed carry the stored error, a replay went only to
#     the request that made the record, a rejection only to another one
#     than the holder it names.
# Figures are printed with diag.  Sizes are CI sizes; IDEM_CRASH_ROUNDS and
# IDEM_CRASH_SEED make it longer or repeatable.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;
use IPC::Run;
use Time::HiRes qw(sleep);

my $rounds = $ENV{IDEM_CRASH_ROUNDS} // 6;    # half kills, half immediate stops
my $seed = $ENV{IDEM_CRASH_SEED} // (time() ^ $$);
srand($seed);
diag("crash suite: seed $seed (IDEM_CRASH_SEED), $rounds fault rounds");

my $node = idem_node('crash_suite', conf => qq{
max_connections = 40
restart_after_crash = on
log_statement = none
});

$node->safe_psql('postgres', q{
CREATE SCHEMA shop;
-- deliberately no UNIQUE (request_key): preventing a second order is the
-- extension's job, and the invariants check that it did it
CREATE TABLE shop.orders (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key text   NOT NULL,
    body        jsonb  NOT NULL);
CREATE INDEX ON shop.orders (request_key);
-- one row per answer, written in the transaction that gives it
CREATE TABLE shop.request_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_key text   NOT NULL,
    body        jsonb  NOT NULL,
    client      int    NOT NULL,
    answer      text   NOT NULL CHECK (answer IN
                ('created', 'replay', 'failed', 'replay_failed', 'retry', 'in_progress', 'rejected')),
    order_id    bigint,
    error       jsonb,
    waited      boolean NOT NULL);
CREATE INDEX ON shop.request_log (request_key);

CREATE FUNCTION shop.place_order(p_key text, p_body jsonb, p_wait boolean,
                                 p_flaky boolean, p_client int)
RETURNS text LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c      record;
    new_id bigint;
    ans    text;
    err    jsonb;
    detail text;
BEGIN
    BEGIN
        SELECT * INTO c FROM public.idem_claim(p_key, scope => 'shop',
               fingerprint => public.idem_fingerprint(p_body), wait => p_wait);
    EXCEPTION WHEN SQLSTATE 'IK001' THEN
        -- the DETAIL names the fingerprint of the request holding the key
        GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
        INSERT INTO shop.request_log (request_key, body, client, answer, error, waited)
        VALUES (p_key, p_body, p_client, 'rejected',
                jsonb_build_object('held_by', substring(detail FROM 'held by a request with fingerprint \\\\x([0-9a-f]+)')),
                p_wait);
        RETURN 'rejected';
    END;
    IF c.outcome = 'claimed' THEN
        IF p_flaky THEN
            -- a transient failure: the key is released for the retry
            PERFORM public.idem_fail(p_key, '{"error": "transient"}', retryable => true, scope => 'shop');
            ans := 'retry';
        ELSIF (p_body ->> 'sku')::int % 10 = 7 THEN
            -- a final failure: stored and replayed
            err := jsonb_build_object('error', 'declined', 'sku', p_body -> 'sku');
            PERFORM public.idem_fail(p_key, err, retryable => false, scope => 'shop');
            ans := 'failed';
        ELSE
            INSERT INTO shop.orders (request_key, body) VALUES (p_key, p_body)
            RETURNING id INTO new_id;
            -- the rest of the work: keeps the claim open for duplicates and kills
            PERFORM pg_sleep(0.003);
            PERFORM public.idem_finish(p_key, jsonb_build_object('order_id', new_id), scope => 'shop');
            ans := 'created';
        END IF;
    ELSIF c.outcome = 'replay' AND c.status = 'succeeded' THEN
        new_id := (c.result ->> 'order_id')::bigint;
        ans := 'replay';
    ELSIF c.outcome = 'replay' THEN
        err := c.result;
        ans := 'replay_failed';
    ELSE
        ans := 'in_progress';
    END IF;
    INSERT INTO shop.request_log (request_key, body, client, answer, order_id, error, waited)
    VALUES (p_key, p_body, p_client, ans, new_id, err, p_wait);
    RETURN ans;
END $$;
});

# 60 % of requests go to 3 hot keys (new ones every 250 ms, so that
# duplicates meet uncommitted claims), the rest to 20000 cold ones; a quarter
# use wait => false; 5 % hit a transient failure; 3 % reuse the key with
# another body (qty 2); cold keys whose sku ends in 7 are declined for good.
my $script = "$PostgreSQL::Test::Utils::tmp_check/place_order.pgbench";
open my $fh, '>', $script or die $!;
print $fh q{\set r random(1, 100)
\set h random(1, 3)
\set c random(1, 20000)
\set w random(1, 4)
\set f random(1, 100)
\set q random(1, 100)
SELECT shop.place_order(CASE WHEN :r <= 60 THEN 'hot-' || (extract(epoch FROM clock_timestamp()) * 4)::bigint || '-' || :h ELSE 'cold-' || :c END, jsonb_build_object('sku', CASE WHEN :r <= 60 THEN :h ELSE :c % 100 END, 'qty', CASE WHEN :q <= 3 THEN 2 ELSE 1 END), :w > 1, :f <= 5, :client_id);
};
close $fh;

# Every invariant as a count of violations, in one snapshot.
my $invariants = q{
WITH rec AS (SELECT key, status, result, fingerprint, locked_until
               FROM idempotent_record WHERE scope = 'shop'),
     o AS (SELECT request_key, count(*) AS n, min(id) AS id
             FROM shop.orders GROUP BY request_key)
SELECT
  (SELECT count(*) FROM o WHERE n > 1)
  || ' ' ||
  (SELECT count(*) FROM rec LEFT JOIN o ON o.request_key = rec.key
    WHERE rec.status = 'succeeded'
      AND (o.id IS NULL OR (rec.result ->> 'order_id')::bigint IS DISTINCT FROM o.id))
  || ' ' ||
  (SELECT count(*) FROM shop.orders so LEFT JOIN rec ON rec.key = so.request_key
    WHERE rec.status IS DISTINCT FROM 'succeeded')
  || ' ' ||
  (SELECT count(*) FROM rec WHERE status = 'in_progress' AND locked_until IS NULL)
  || ' ' ||
  (SELECT count(*) FROM shop.request_log l LEFT JOIN rec ON rec.key = l.request_key
    WHERE l.answer IN ('created', 'replay')
      AND (rec.status IS DISTINCT FROM 'succeeded'
           OR (rec.result ->> 'order_id')::bigint IS DISTINCT FROM l.order_id
           OR rec.fingerprint IS DISTINCT FROM idem_fingerprint(l.body)))
  || ' ' ||
  (SELECT count(*) FROM shop.request_log l LEFT JOIN rec ON rec.key = l.request_key
    WHERE l.answer IN ('failed', 'replay_failed')
      AND (rec.status IS DISTINCT FROM 'failed' OR rec.result IS DISTINCT FROM l.error
           OR rec.fingerprint IS DISTINCT FROM idem_fingerprint(l.body)))
  || ' ' ||
  (SELECT count(*) FROM shop.orders so
    WHERE (SELECT count(*) FROM shop.request_log l
            WHERE l.answer = 'created' AND l.order_id = so.id AND l.request_key = so.request_key) <> 1)
  || ' ' ||
  -- a rejection names a holder whose fingerprint differs from the request's;
  -- after waiting, the holder was committed, so the record still differs,
  -- unless a transient failure released the key since.  With wait => false
  -- the holder may have been an uncommitted claim that then rolled back (a
  -- crash, say), so the key may since belong to the rejected body.
  (SELECT count(*) FROM shop.request_log l LEFT JOIN rec ON rec.key = l.request_key
    WHERE l.answer = 'rejected'
      AND (l.error ->> 'held_by' IS NULL
           OR decode(l.error ->> 'held_by', 'hex') = idem_fingerprint(l.body)
           OR (l.waited
               AND NOT EXISTS (SELECT 1 FROM shop.request_log r2
                                WHERE r2.request_key = l.request_key AND r2.answer = 'retry')
               AND (rec.fingerprint IS NULL OR rec.fingerprint = idem_fingerprint(l.body)))))
};
my @invariant_names = (
	'keys with more than one order',
	'succeeded keys without their order',
	'orders without a succeeded record',
	'committed in-transaction claims without an outcome',
	'success answers that disagree with the record',
	'failure answers that disagree with the record',
	'orders without exactly one created answer',
	'rejections of the request that owns the key');

my ($kills, $stops, $reinits, $requests_reported, $unexpected_errors) = (0, 0, 0, 0, 0);
my $violations = 0;

sub check_invariants
{
	my ($when) = @_;
	my @counts = split / /, $node->safe_psql('postgres', $invariants);
	for my $i (0 .. $#invariant_names)
	{
		is($counts[$i], 0, "$when: no $invariant_names[$i]");
		$violations += $counts[$i];
	}
}

sub start_load
{
	my ($seconds) = @_;
	my ($out, $err) = ('', '');
	local $ENV{PGAPPNAME} = 'pgbench';
	my $h = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '16', '-j', '2', '-T', $seconds, '-f', $script,
		  '-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$out, '2>', \$err);
	# all 16 clients connected before any fault
	for (my $i = 0; $i < 300; $i++)
	{
		last if $node->safe_psql('postgres',
			"SELECT count(*) >= 16 FROM pg_stat_activity WHERE application_name = 'pgbench'") eq 't';
		sleep(0.1);
	}
	return ($h, \$out, \$err);
}

sub finish_load
{
	my ($h, $out, $err) = @_;
	$h->finish;
	my ($n) = $$out =~ /number of transactions actually processed: (\d+)/;
	$requests_reported += $n // 0;
	# connection losses are the faults themselves; any SQL error is not
	my @errors = grep { /ERROR:/ } split /\n/, $$err;
	diag("unexpected client error: $_") for @errors;
	$unexpected_errors += @errors;
}

# Kill 1 to 3 random pgbench backends with SIGKILL: the postmaster sees a
# backend die without cleanup and reinitializes the whole cluster.
sub kill_backends
{
	my @pids = split /\n/, $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'");
	my $n = 1 + int(rand(3));
	for (1 .. $n)
	{
		my $pid = $pids[ int(rand(@pids)) ];
		kill 'KILL', $pid and $kills++;
	}
}

my $log_offset = 0;
for my $round (1 .. $rounds)
{
	my ($h, $out, $err) = start_load(30);
	sleep(0.5 + rand(2.5));
	my $fault;
	if ($round % 2)
	{
		kill_backends();
		$fault = 'SIGKILL';
		$node->wait_for_log(qr/all server processes terminated; reinitializing/, $log_offset);
		$reinits++;
		$log_offset = -s $node->logfile;
	}
	else
	{
		$node->stop('immediate');
		$stops++;
		$fault = 'immediate stop';
	}
	finish_load($h, $out, $err);
	$node->start if $fault eq 'immediate stop';
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'server did not come back';
	$log_offset = -s $node->logfile;
	check_invariants("round $round ($fault)");
}

# the service goes on after the faults: a bounded run that ends by itself
{
	my ($h, $out, $err) = start_load(3);
	finish_load($h, $out, $err);
	like($$out, qr/number of failed transactions: 0 /, 'a last run without faults completes without errors');
}
check_invariants('after the last run');

# every succeeded or failed key replays its stored outcome to its own body
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM idempotent_record r,
	       LATERAL (SELECT body FROM shop.request_log l
	                 WHERE l.request_key = r.key
	                   AND idem_fingerprint(l.body) = r.fingerprint LIMIT 1) l,
	       LATERAL idem_claim(r.key, scope => 'shop', fingerprint => idem_fingerprint(l.body)) c
	 WHERE r.scope = 'shop' AND r.status IN ('succeeded', 'failed')
	   AND (c.outcome <> 'replay' OR c.result IS DISTINCT FROM r.result)}),
	'0', 'every stored outcome replays after the crashes');

is($unexpected_errors, 0, 'no client got an SQL error (only lost connections)');
ok($kills >= 3 && $reinits >= 3, 'backends were killed and the postmaster reinitialized at least 3 times');
ok($stops >= 3, 'the server was stopped with -m immediate at least 3 times');

my ($answers, $orders, $succeeded, $failed, $replays, $in_progress, $rejected, $retries) =
  split /\|/, $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM shop.request_log),
	       (SELECT count(*) FROM shop.orders),
	       (SELECT count(*) FROM idempotent_record WHERE status = 'succeeded'),
	       (SELECT count(*) FROM idempotent_record WHERE status = 'failed'),
	       (SELECT count(*) FROM shop.request_log WHERE answer IN ('replay', 'replay_failed')),
	       (SELECT count(*) FROM shop.request_log WHERE answer = 'in_progress'),
	       (SELECT count(*) FROM shop.request_log WHERE answer = 'rejected'),
	       (SELECT count(*) FROM shop.request_log WHERE answer = 'retry')});
ok($answers > 0 && $replays > 0 && $orders > 0, 'the load placed orders and replayed duplicates');
diag(sprintf('crash suite figures: requests %d (answers committed %d), kills %d, '
	  . 'postmaster reinitializations %d, immediate stops %d, restarts %d, '
	  . 'orders %d, succeeded keys %d, failed keys %d, replays %d, in_progress %d, '
	  . 'rejected %d, transient failures %d, violations %d',
	$requests_reported, $answers, $kills, $reinits, $stops, $reinits + $stops,
	$orders, $succeeded, $failed, $replays, $in_progress, $rejected, $retries,
	$violations));

$node->stop;
done_testing();
