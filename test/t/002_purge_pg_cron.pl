# Retention with the real pg_cron: idem_purge_all scheduled every minute
# removes the expired records, and never a live lease or an unknown outcome.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::RealBin;
use IdemTest;

my $node = idem_node('purge_cron',
	preload    => ['pg_cron'],
	conf       => "cron.database_name = 'postgres'\ncron.use_background_workers = on\n"
	  . "max_worker_processes = 20\n",
	extensions => ['pg_cron']);

# (key, status, lease end, expiry), times from now: 2500 expired records
# the purge removes, and the three it must leave (an unexpired record, a
# live lease, an unknown outcome)
my @records = (
	(map { [ "old-$_", 'succeeded', undef, '-1 hour' ] } 1 .. 2500),
	[ 'fresh',       'succeeded',   undef,    '1 day' ],
	[ 'leased-live', 'in_progress', '1 hour', '-1 hour' ],
	[ 'unknown',     'unknown',     undef,    '-1 hour' ]);
$node->safe_psql('postgres',
	'INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at) VALUES '
	  . join(",\n", map {
		  my ($key, $status, $lease, $expiry) = @$_;
		  my $locked_until = defined $lease ? "now() + interval '$lease'" : 'NULL';
		  "('$key', '$status', 1, $locked_until, now(), now(), now() + interval '$expiry')"
	  } @records));

# the schedule from the README
$node->safe_psql('postgres',
	"SELECT cron.schedule('idempotency-purge', '* * * * *', 'CALL idem_purge_all(1000)')");

# pg_cron 1.4 runs jobs on the minute: wait for the rows to go
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM idempotent_record WHERE key LIKE 'old-%'"),
	'the scheduled purge removed every expired record');
is( $node->safe_psql('postgres', 'SELECT string_agg(key, \',\' ORDER BY key) FROM idempotent_record'),
	'fresh,leased-live,unknown',
	'the unexpired record, the live lease and the unknown outcome stay');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE status = 'succeeded'"),
	'pg_cron reports the job run as succeeded');

$node->stop;
done_testing();
