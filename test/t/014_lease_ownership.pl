# Who owns a leased claim, with real leases and real connections: no lock
# outlives a call, so a leased claim is finished from another connection;
# a duplicate of a leased claim gets in_progress with a retry hint; lease
# and retention are independent; a stale owner cannot overwrite or delete
# (also after the key was released and claimed again); a non-owner, even on
# its error path, cannot release the key.  (A worker that crashes during its
# lease is in 001_lease_crash.pl, purge beside live leases in
# 004_purge_under_load.pl.)  Leases end by the server's clock: the test
# waits for that with poll_query_until, and simulates only the 10 minutes
# and the day of the retention checks by moving the record's timestamps
# back.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $node = idem_node('lease_ownership');

sub sql { return $node->safe_psql('postgres', $_[0]) }

# each of calls fails with an SQLSTATE that matches sqlstate; the test
# names are name with the call in place of %s
sub refused
{
	my ($sqlstate, $name, @calls) = @_;
	for my $call (@calls)
	{
		my ($rc, $out, $err) = psql_verbose($node, "SELECT $call");
		like($err, qr/ERROR:  $sqlstate/, sprintf($name, $call));
	}
}

###############################################################################
# no lock outlives a call
###############################################################################
my $a = $node->background_psql('postgres');
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
my $locks = "SELECT count(*) FROM pg_locks WHERE pid = $a_pid AND locktype <> 'virtualxid'";
$a->query_safe("SELECT outcome FROM idem_claim('k5', lease => '1 hour')");
is(sql($locks), '0', 'no lock outlives a call: none after a leased claim returns');
$a->query_safe(q{BEGIN; SELECT idem_claim('k5-tx'); SELECT idem_finish('k5-tx', '{}'); COMMIT;});
is(sql($locks), '0', 'no lock outlives a call: none after claim and finish commit');
$a->query_safe("SELECT outcome FROM idem_claim('k5-tx')");
is(sql("SELECT count(*) FROM pg_locks WHERE pid = $a_pid AND locktype = 'advisory'"),
	'0', 'no lock outlives a call: no advisory lock after a replay');
$a->quit;
# the worker's connection is gone; another connection finishes with the fence
is(sql(q{SELECT idem_finish('k5', '{"by": "another connection"}', fence => 1);
		 SELECT outcome || ' ' || (result ->> 'by') FROM idem_claim('k5')}),
	"\nreplay another connection",
	'a leased claim is finished from another connection: the fence is all it takes');

###############################################################################
# a duplicate of a leased claim: A's leased claim commits; B gets in_progress with
# a retry hint (idempotency.retry_after, 1 s, while the lease has longer to
# run), never 23505, an empty row or a claim
###############################################################################
my $a1 = $node->background_psql('postgres');
$a1->query_safe("SELECT outcome FROM idem_claim('k1-leased', lease => '1 hour', fingerprint => '\\x01')");
is(sql("SELECT outcome || ' ' || status || ' ' || fence || ' ' || retry_after
          FROM idem_claim('k1-leased', fingerprint => '\\x01')"),
	'in_progress in_progress 1 00:00:01',
	'leased duplicate: B gets in_progress with idempotency.retry_after as retry hint');
is(sql("SELECT outcome || ' ' || (retry_after IS NOT NULL) FROM idem_claim('k1-leased', fingerprint => '\\x01', wait => false)"),
	'in_progress true', 'leased duplicate: the same with wait => false');
$a1->query_safe("SELECT idem_finish('k1-leased', '{\"order_id\": 1}', fence => 1)");
$a1->quit;
is(sql("SELECT outcome || ' ' || result FROM idem_claim('k1-leased', fingerprint => '\\x01')"),
	'replay {"order_id": 1}', "leased duplicate: after A's finish B replays A's result");

###############################################################################
# lease and retention are independent
###############################################################################
is(sql("SELECT outcome FROM idem_claim('k8', lease => '1 hour', ttl => '1 day')"),
	'claimed', 'lease and retention: a claim with a 1 hour lease and a 1 day ttl');
# ten minutes later (the record's clock moved back 10 minutes)
sql(q{UPDATE idempotent_record
         SET created_at = created_at - interval '10 minutes', updated_at = updated_at - interval '10 minutes',
             locked_until = locked_until - interval '10 minutes', expires_at = expires_at - interval '10 minutes'
       WHERE key = 'k8'});
like(sql("SELECT outcome || ' ' || (SELECT locked_until - clock_timestamp() BETWEEN interval '49 minutes' AND interval '50 minutes' FROM idempotent_record WHERE key = 'k8') FROM idem_claim('k8')"),
	qr/^in_progress true$/, 'lease and retention are independent: at +10 min in_progress, 50 minutes of lease left');

# the leases of k8b (retention), k10 (stale owner) and k11 (non-owner):
# an hour, so that they are live whatever the machine's speed, ended
# together below
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k8b', lease => '1 hour', ttl => '1 day')"),
	'claimed 1', 'lease and retention: a claim with a 1 hour lease and a 1 day ttl');
my $worker = $node->background_psql('postgres');
my $worker_pid = $worker->query_safe(
	"SELECT pg_backend_pid() FROM idem_claim('k10', lease => '1 hour')");
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k11', lease => '1 hour', fingerprint => '\\x0a')"),
	'claimed 1', 'non-owner: A claims k11 with a lease');

###############################################################################
# a non-owner cannot release the key (while A's lease is live)
###############################################################################
is(sql("SELECT outcome FROM idem_claim('k11', fingerprint => '\\x0a')"), 'in_progress',
	'non-owner: B gets in_progress');
refused('IK00[23]', "a non-owner cannot release the key: B's %s is refused",
	"idem_fail('k11', '{\"e\": \"B\"}')",
	"idem_fail('k11', '{\"e\": \"B\"}', fence => 7)",
	"idem_fail('k11', '{\"e\": \"B\"}', retryable => false, fence => 0)",
	"idem_finish('k11', '{\"e\": \"B\"}', fence => 2)",
	"idem_mark_unknown('k11', '{\"e\": \"B\"}')");
my ($rc, $out, $err) = psql_verbose($node, "SELECT outcome FROM idem_claim('k11', fingerprint => '\\x0b')");
like($err, qr/ERROR:  IK001/, 'non-owner: a different request with the key is refused (IK001)');
# the error path of an application: the rejected request "cleans up"
($rc, $out, $err) = psql_verbose($node, q{
DO $$
BEGIN
    PERFORM idem_claim('k11', fingerprint => '\x0b');
EXCEPTION WHEN SQLSTATE 'IK001' THEN
    PERFORM idem_fail('k11', '{"error": "rejected"}');
END $$});
like($err, qr/ERROR:  IK00[23]/, "non-owner: the rejected request's error path cannot release the key");
is(sql("SELECT outcome || ' ' || status || ' ' || fence FROM idem_claim('k11')"),
	'in_progress in_progress 1', 'a non-owner cannot release the key: C still gets in_progress');

###############################################################################
# after the leases
###############################################################################
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker_pid)");
end_lease($node, 'k8b', 'k10', 'k11');

# lease and retention: the record outlives the lease; a day later it is gone
is(sql("SELECT status || ' ' || fence FROM idem_lookup('k8b')"), 'in_progress 1',
	'lease and retention: after the lease the record is still there');
is(sql('SELECT idem_purge(1000)'), '0', 'lease and retention: purge does not remove it (its ttl has not passed)');
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k8b', lease => '1 minute')"), 'claimed 2',
	'lease and retention are independent: after the lease B claims it (fence 2)');
sql("SELECT idem_finish('k8b', '{\"by\": \"B\"}', fence => 2)");
# a day later: every time of the record a day (and a minute) back, in
# hours (a calendar day of the session's TimeZone can last 23 hours: the
# record would then be kept an hour longer)
sql("UPDATE idempotent_record SET created_at = created_at - interval '24 hours 1 minute',"
	. " updated_at = updated_at - interval '24 hours 1 minute', expires_at = expires_at - interval '24 hours 1 minute'"
	. " WHERE key = 'k8b'");
is(sql("SELECT count(*) FROM idem_lookup('k8b')"), '0', 'lease and retention: a day later the record counts as gone');
is(sql("SELECT idem_purge(1000) >= 1"), 't', 'lease and retention: ... and purge removes it');

# a stale owner cannot overwrite or delete: B takes over; the stale owner A
# cannot finish, fail or release
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k10', lease => '1 minute')"), 'claimed 2',
	'stale owner: B claims k10 after A lease ended (fence 2)');
refused('IK003', "a stale owner cannot overwrite or delete: A's %s is refused (IK003)",
	"idem_finish('k10', '{\"by\": \"A\"}', fence => 1)",
	"idem_fail('k10', '{\"by\": \"A\"}', retryable => false, fence => 1)",
	"idem_fail('k10', '{\"by\": \"A\"}', retryable => true, fence => 1)",
	"idem_checkpoint('k10', 'A', fence => 1)",
	"idem_mark_unknown('k10', '{\"by\": \"A\"}', fence => 1)");
is(sql("SELECT status || ' ' || fence || ' ' || coalesce(result::text, '-') FROM idempotent_record WHERE key = 'k10'"),
	'in_progress 2 -', 'stale owner: nothing changed');
sql("SELECT idem_finish('k10', '{\"by\": \"B\"}', fence => 2)");
is(sql("SELECT outcome || ' ' || (result ->> 'by') FROM idem_claim('k10')"), 'replay B',
	"a stale owner cannot overwrite or delete: C replays B's result");

# a non-owner after the lease: the next claim with the same request takes over
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k11', fingerprint => '\\x0a', lease => '1 minute')"),
	'claimed 2', 'non-owner: after the lease the same request takes over');

# a stale owner across a released key: A (fence 1) is paused, B takes over
# (fence 2) and releases the key with a retryable failure, C claims it
# again.  A wakes up: its fence-1 finish must be refused, because C's
# claim must not carry a fence that A ever held.
sql("SELECT outcome FROM idem_claim('k10r', lease => '1 hour')");
sql("UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE key = 'k10r'");
is(sql("SELECT outcome || ' ' || fence FROM idem_claim('k10r', lease => '1 hour')"), 'claimed 2',
	'stale owner: B takes over k10r (fence 2)');
sql("SELECT idem_fail('k10r', '{\"e\": \"provider down\"}', retryable => true, fence => 2)");
like(sql("SELECT outcome || ' ' || fence FROM idem_claim('k10r', lease => '1 hour')"), qr/^claimed \d+$/,
	'stale owner: C claims the released key');
($rc, $out, $err) = psql_verbose($node, "SELECT idem_finish('k10r', '{\"by\": \"A\"}', fence => 1)");
like($err, qr/ERROR:  IK003/,
	"a stale owner cannot overwrite or delete: after a release and a new claim, the first owner's fence is still refused");
is(sql("SELECT status || ' ' || coalesce(result::text, '-') FROM idempotent_record WHERE key = 'k10r'"),
	'in_progress {"e": "provider down"}', "stale owner: C's claim is untouched (it keeps B's retryable error as its reason)");

$node->stop;
done_testing();
