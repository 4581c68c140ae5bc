# Huge values (bad-input matrix).  A result, an error or a
# recovery point is an ordinary jsonb or text value, so PostgreSQL's limits
# apply: 1 GB for any field, 256 MB for a jsonb container (54000 past it).
# This suite shows that what is stored is replayed exactly: a result that
# does not compress (stored out of line, TOAST), a 10 MB result, a 10 MB
# error and a 10 MB recovery point, by idem_claim and idem_lookup, and a
# 10 MB body fingerprinted.  It runs on a cluster of its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

# until the replay of large values is fixed, a crash must not end the run
my $node = idem_node('huge_values', conf => "log_statement = none\nrestart_after_crash = on\n");

sub replay_ok
{
	my ($sql, $expected, $name) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	is($out, $expected, $name);
	diag("server: $err") if $rc != 0;
	# a crash takes the server through recovery: wait for it
	for (1 .. 120)
	{
		last if eval { $node->safe_psql('postgres', 'SELECT 1') eq '1' };
		select(undef, undef, undef, 0.5);
	}
}

# 6400 characters of hex: do not compress, stored out of line
$node->safe_psql('postgres', q{
BEGIN;
SELECT outcome FROM idem_claim('toasted');
SELECT idem_finish('toasted', jsonb_build_object('blob', (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i)));
COMMIT;});
is($node->safe_psql('postgres',
		"SELECT pg_column_size(result) > 6000 FROM idempotent_record WHERE key = 'toasted'"),
	't', 'a 6 kB result that does not compress is stored as it is');
replay_ok(q{SELECT outcome || ' ' || length(result ->> 'blob') || ' '
          || (result = (SELECT result FROM idempotent_record WHERE key = 'toasted'))
     FROM idem_claim('toasted')},
	'replay 6400 true', 'a result stored out of line (TOAST) replays exactly');
replay_ok(q{SELECT length(result ->> 'blob') FROM idem_lookup('toasted')},
	'6400', '... and idem_lookup returns it');

# 10 MB
$node->safe_psql('postgres', q{
BEGIN;
SELECT outcome FROM idem_claim('huge');
SELECT idem_finish('huge', jsonb_build_object('blob', repeat('x', 10 * 1024 * 1024), 'n', 1));
COMMIT;});
replay_ok(q{SELECT outcome || ' ' || length(result ->> 'blob') || ' ' || (result -> 'n') FROM idem_claim('huge')},
	'replay 10485760 1', 'a 10 MB result replays exactly');
replay_ok(q{SELECT length(result ->> 'blob') FROM idem_lookup('huge')},
	'10485760', '... and idem_lookup returns it');
is($node->safe_psql('postgres',
		q{SELECT length(idem_fingerprint(jsonb_build_object('blob', repeat('y', 10 * 1024 * 1024))))}),
	'32', 'a 10 MB body is fingerprinted');

$node->safe_psql('postgres', q{
SELECT outcome FROM idem_claim('huge-lease', lease => '1 hour');
SELECT idem_checkpoint('huge-lease', repeat('p', 10 * 1024 * 1024), fence => 1);});
replay_ok(q{SELECT outcome || ' ' || length(recovery_point) FROM idem_claim('huge-lease')},
	'in_progress 10485760', 'a 10 MB recovery point is returned to a duplicate');
$node->safe_psql('postgres', q{
UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second' WHERE key = 'huge-lease';});
replay_ok(q{SELECT outcome || ' ' || fence || ' ' || length(recovery_point) FROM idem_claim('huge-lease', lease => '1 hour')},
	'claimed 2 10485760', '... and to the claim that takes over');
$node->safe_psql('postgres', q{
SELECT idem_fail('huge-lease', jsonb_build_object('e', repeat('e', 10 * 1024 * 1024)), retryable => false, fence => 2);});
replay_ok(q{SELECT outcome || ' ' || status || ' ' || length(result ->> 'e') FROM idem_claim('huge-lease')},
	'replay failed 10485760', 'a 10 MB final error replays exactly');

ok(!$node->log_contains(qr/terminated by signal/), 'no backend crashed');

$node->stop;
done_testing();
