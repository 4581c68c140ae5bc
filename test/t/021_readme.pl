# The README's SQL runs as printed: each ```sql block after a line
# "<!-- tested by test/t/021_readme.pl -->".  The quick start gives the
# answers its comments state; the grants of the install checklist are
# enough for an application role to claim, finish and use tokens and for a
# maintenance role to purge and reconcile, and without them the application role gets
# 42501.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = slurp_file("$ENV{TESTDIR}/README.md");
my @blocks;
while ($readme =~ /<!-- tested by test\/t\/021_readme\.pl -->\n[ \t]*```sql\n(.*?)\n[ \t]*```/sg)
{
	(my $sql = $1) =~ s/^ {3}//mg;    # a block indented in a list item
	push @blocks, $sql;
}
is(scalar @blocks, 2, 'the README has the two tested blocks (grants, quick start)');
my ($grants, $quick_start) = @blocks;

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->start;

# the quick start, as a superuser in a new database
my ($rc, $out, $err) = $node->psql('postgres', $quick_start, extended_query => 0);
my @answers = grep { /order_id|^\d+$/ } split /\n/, $out;
is_deeply(\@answers, [ '{"order_id": 1}', '{"order_id": 1}', '1' ],
	'quick start: the first call places order 1, the duplicate replays it, one order');
like($err, qr/ERROR:  idempotency key was already used for a different request/,
	'quick start: the key with another body is refused (IK001)');
unlike($err =~ s/.*already used for a different request.*\n?//r, qr/ERROR/,
	'quick start: no other error');

# the grants, in a database of their own
$node->safe_psql('postgres', 'CREATE DATABASE grants');
$node->safe_psql('grants', q{
	CREATE EXTENSION idempotency;
	CREATE ROLE app LOGIN;
	CREATE ROLE maint LOGIN;
	CREATE ROLE stranger LOGIN;
	INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
	VALUES ('old', 'succeeded', 1, now() - interval '2 days', now() - interval '2 days',
	        now() - interval '1 day');});
$node->safe_psql('grants', $grants);
my $app_work = q{
	BEGIN;
	SELECT outcome FROM idem_claim('k1', scope => 's');
	SELECT idem_finish('k1', '{"ok": true}', scope => 's');
	COMMIT;
	SELECT outcome FROM idem_claim('k1', scope => 's');
	SELECT idem_token_consume(idem_token_issue('form'), 'form');};
is($node->safe_psql('grants', "SET ROLE app; $app_work"), "claimed\n\nreplay\nt",
	'install grants: the application role claims, finishes, replays and uses a token');
is($node->safe_psql('grants', 'SET ROLE maint; SELECT idem_purge(); CALL idem_purge_all(); SELECT count(*) FROM idem_pending;'),
	"1\n0", 'install grants: the maintenance role purges and reads idem_pending');
($rc, $out, $err) = $node->psql('grants', "SET ROLE stranger; SELECT * FROM idem_claim('k2')");
like($err, qr/permission denied for idempotency scope/,
	'without the grants a role gets 42501');

$node->stop;
done_testing();
