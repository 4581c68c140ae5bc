# Differential model test: the direct heap/index path against planned SQL
# (idempotency.direct_access on and off), and both against a reference
# model of the write rules (README "Writes after a claim").
#
# One cluster, one database per path setting (IDEM_MODEL_PATHS, by default
# "on,off": every session of the first database takes the direct path where
# it may, every session of the second planned SQL).  Each database has
# three sessions and a control connection.  One random generator draws the
# steps and the session that runs each, and every step runs in every
# database at once:
#   - calls: claim (in-transaction or leased, wait or not, with or without a
#     fingerprint), finish, fail (retryable or final), mark_unknown,
#     checkpoint, extend_lease (fences right, missing, stale or from the
#     future), lookup, once, purge, and a claim that records its outcome in
#     the same statement;
#   - each call in a statement shape: plain SELECT; caught by a PL/pgSQL
#     exception block; from a BEFORE, an AFTER or a deferred (to COMMIT)
#     trigger of a business table; INSERT ... SELECT; in the RETURNING list
#     of an UPDATE or a DELETE of the record it is about; after a writable
#     CTE that updated that record; before an UPDATE of that record, or in
#     the WHERE clause of an UPDATE or a DELETE of it;
#   - the session's own UPDATE or DELETE of a record, a statement of its
#     own (between a claim and its outcome the claim's row address goes
#     stale; after a DELETE the key can be claimed again in the transaction);
#   - BEGIN (READ COMMITTED, REPEATABLE READ, or SERIALIZABLE in one
#     session), COMMIT, PREPARE TRANSACTION with COMMIT PREPARED, ROLLBACK,
#     SAVEPOINT, ROLLBACK TO, RELEASE;
#   - the control connection ends leases and retention periods.
# In the runs with IDEM_MODEL_NESTED_CHECK=1 (odd seeds by default) a CHECK
# constraint on the record table calls idem_lookup, so that every write
# makes a nested call, one in two from an exception block.  A step never
# waits for another session: the model knows which rows each open
# transaction has written, and only a claim with wait => false, a read or
# purge (SKIP LOCKED) goes near them.
#
# After every step, each database's answer (rows, SQLSTATE, and the ERROR,
# DETAIL and HINT lines) must equal the first database's, and the model's;
# after every step that may commit, each database's tables (records and
# business rows) must equal the first's, and the records the model's.  Times
# differ from one database to the other by the scheduling of the steps, so
# they are shown relative to the server clock at the moment of reading
# ("~seconds") and compared within a tolerance far below the lengths
# involved (a lease is an hour, a ttl a day, an ended lease or retention
# period is moved back a minute or a day), while which times are equal is
# compared exactly.  On a divergence the test replays shorter and shorter
# subsequences on fresh tables and prints the seed and the shortest sequence
# that still diverges the same way (paths, or server and model).  At the
# end, pg_stat_statements must show that the databases took their paths:
# no record read or outcome as planned SQL with the setting on, some off.
#
#   IDEM_MODEL_SEED=n  repeat a run   IDEM_MODEL_OPS=n  its length
#   IDEM_MODEL_PATHS=on,off  one database per item; an item is on, off, or
#                      one setting per session joined by "+" (on+on+off)
#   IDEM_MODEL_NESTED_CHECK=0|1  without or with the CHECK constraint
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $seed = $ENV{IDEM_MODEL_SEED} // int(rand(2**31));
my $n_ops = $ENV{IDEM_MODEL_OPS} // 15_000;
my @paths = split /,/, ($ENV{IDEM_MODEL_PATHS} // 'on,off');
my $nested_check = $ENV{IDEM_MODEL_NESTED_CHECK} // $seed % 2;
my $n_sessions = 3;
diag("model test: seed $seed (IDEM_MODEL_SEED), $n_ops operations (IDEM_MODEL_OPS), "
	  . "$n_sessions sessions in each of the databases " . join(', ', @paths)
	  . " (IDEM_MODEL_PATHS), CHECK constraint calling the extension " . ($nested_check ? 'on' : 'off')
	  . ' (IDEM_MODEL_NESTED_CHECK)');

my $node = PostgreSQL::Test::Cluster->new('model');
$node->init;
# pg_stat_statements counts the planned statements the store runs (see the
# end); PREPARE TRANSACTION needs prepared transactions
$node->append_conf('postgresql.conf', "log_statement = none\nlog_min_messages = warning\n"
	  . "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = all\n"
	  . "max_prepared_transactions = 10\n");
$node->start;

# Times relative to the server clock; a business table whose triggers
# (BEFORE, AFTER, deferred to COMMIT) run a call (EXECUTE); a call whose
# error is caught; a CHECK constraint that calls the extension (added to the
# record table in the runs with IDEM_MODEL_NESTED_CHECK=1).
my $fixtures = <<'EOF';
CREATE EXTENSION idempotency;
CREATE EXTENSION pg_stat_statements;
CREATE FUNCTION rel_t(t timestamptz) RETURNS text LANGUAGE sql
  AS $$ SELECT '~' || round(extract(epoch FROM t - clock_timestamp()), 3) $$;
CREATE FUNCTION rel_i(i interval) RETURNS text LANGUAGE sql
  AS $$ SELECT '~' || round(extract(epoch FROM i), 3) $$;
CREATE TABLE biz_call (step int, timing text, call text, answer text);
CREATE FUNCTION biz_call_before() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN EXECUTE NEW.call INTO NEW.answer; RETURN NEW; END $$;
CREATE FUNCTION biz_call_after() RETURNS trigger LANGUAGE plpgsql
  AS $$ DECLARE a text;
  BEGIN
    EXECUTE NEW.call INTO a;
    UPDATE biz_call SET answer = a WHERE step = NEW.step;
    RETURN NULL;
  END $$;
CREATE TRIGGER biz_call_before BEFORE INSERT ON biz_call
  FOR EACH ROW WHEN (NEW.timing = 'before') EXECUTE FUNCTION biz_call_before();
CREATE TRIGGER biz_call_after AFTER INSERT ON biz_call
  FOR EACH ROW WHEN (NEW.timing = 'after') EXECUTE FUNCTION biz_call_after();
CREATE CONSTRAINT TRIGGER biz_call_deferred AFTER INSERT ON biz_call
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.timing = 'deferred') EXECUTE FUNCTION biz_call_after();
CREATE FUNCTION try_call(call text) RETURNS text LANGUAGE plpgsql
  AS $$ DECLARE a text;
  BEGIN
    EXECUTE call INTO a;
    RETURN a;
  EXCEPTION WHEN OTHERS THEN
    RETURN 'caught ' || SQLSTATE;
  END $$;
CREATE FUNCTION nested_check(s text, k text) RETURNS boolean LANGUAGE plpgsql
  AS $$ BEGIN
    IF k = 'k1' THEN
      BEGIN
        PERFORM idem_lookup('k0', s);
      EXCEPTION WHEN OTHERS THEN
        NULL;
      END;
    ELSE
      PERFORM idem_lookup('k1', s);
    END IF;
    RETURN true;
  END $$;
EOF
$fixtures .= "ALTER TABLE idempotent_record ADD CONSTRAINT nested_call CHECK (nested_check(scope, key));\n"
  if $nested_check;

my @dbs = map { "model_$_" } 0 .. $#paths;
for my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, $fixtures);
}

###############################################################################
# A psql session driven step by step: each statement is followed by markers
# on stdout (with its SQLSTATE) and stderr.  A statement that would wait
# trips lock_timeout (55P03), or the 60 s timer: both are divergences, never
# a hang.
###############################################################################
package Session
{
	sub new
	{
		my ($class, $node, $db, $direct_access) = @_;
		my $s = bless { in => '', out => '', err => '', n => 0, db => $db }, $class;
		$s->{timer} = IPC::Run::timer(60);
		$s->{h} = IPC::Run::start(
			[ 'psql', '-X', '-q', '-At', '-v', 'VERBOSITY=default', '-v', "db=$db", '-h', $node->host, '-p', $node->port, '-d', $db ],
			'<', \$s->{in}, '>', \$s->{out}, '2>', \$s->{err}, $s->{timer});
		$s->q("SET lock_timeout = '2s'");
		$s->q("SET idempotency.direct_access = $direct_access") if defined $direct_access;
		return $s;
	}

	sub send
	{
		my ($s, $sql) = @_;
		my $n = ++$s->{n};
		$s->{out} = '';
		$s->{err} = '';
		$s->{in} .= "$sql;\n\\echo \@\@$n :SQLSTATE\n\\warn \@\@$n\n";
		$s->{timer}->start(60);
		$s->{h}->pump_nb;
	}

	# (sqlstate, output, the ERROR/DETAIL/HINT/WARNING/NOTICE lines, with the
	# database's name as "DB")
	sub recv
	{
		my ($s) = @_;
		my $n = $s->{n};
		$s->{h}->pump until $s->{out} =~ /\@\@$n \w+\n/ && $s->{err} =~ /\@\@$n\n/;
		$s->{out} =~ s/\@\@$n (\w+)\n\z//;
		my $state = $1;
		my $out = $s->{out};
		chomp $out;
		my @messages = grep { /^(ERROR|DETAIL|HINT|WARNING|NOTICE):/ }
		  map { s/^psql:<stdin>:\d+: //r =~ s/\Q$s->{db}\E/DB/gr } split /\n/, $s->{err};
		return ($state, $out, join("\n", @messages));
	}

	sub q
	{
		my ($s, $sql) = @_;
		$s->send($sql);
		return $s->recv;
	}

	sub quit
	{
		my ($s) = @_;
		$s->{in} .= "\\q\n";
		$s->{h}->finish;
	}
}
package main;

###############################################################################
# The reference model
###############################################################################
my @ids = ([ '', 'k0' ], [ '', 'k1' ], [ 'a', 'k0' ], [ 'a', 'k1' ]);

my %stats;        # figures of the counted run
my $counting = 0;
my %committed;    # id => record
my @sess;         # per session: in_tx, block (BEGIN), aborted, overlay, held, sp,
                  # fences, iso, snap, deferred (calls queued for COMMIT)
my $version;      # committed row versions, for REPEATABLE READ conflicts
my $tick;         # order of the records' updated_at (purge order)

sub deep
{
	my ($x) = @_;
	return $x unless ref $x;
	return [ map { deep($_) } @$x ] if ref $x eq 'ARRAY';
	return { map { $_ => deep($x->{$_}) } keys %$x };
}

sub reset_model
{
	%committed = ();
	@sess = map { { overlay => {}, held => {}, sp => [], fences => {} } } 1 .. $n_sessions;
	end_tx($_) for 0 .. $#sess;
	$version = 0;
	$tick = 0;
}

# the record session s sees: its own writes over the committed state (as of
# its transaction snapshot under REPEATABLE READ and SERIALIZABLE)
sub visible
{
	my ($s, $id) = @_;
	my $x = $sess[$s];
	if (exists $x->{overlay}{$id})
	{
		return $x->{overlay}{$id}{deleted} ? undef : $x->{overlay}{$id};
	}
	return $x->{snap}{$id} if $x->{snap};
	return $committed{$id};
}

# another session's open transaction has written the row of id
sub writer_of
{
	my ($s, $id) = @_;
	for my $t (0 .. $#sess)
	{
		next if $t == $s;
		return $t if $sess[$t]{in_tx} && exists $sess[$t]{overlay}{$id};
	}
	return undef;
}

# Under a transaction snapshot: has another transaction committed a change
# to the row of id (or inserted or deleted it) since?  A write to it then
# raises 40001.
sub snap_changed
{
	my ($s, $id) = @_;
	my $x = $sess[$s];
	return 0 if !$x->{snap} || exists $x->{overlay}{$id};
	my ($c, $p) = ($committed{$id}, $x->{snap}{$id});
	return ($c ? $c->{ver} : -1) != ($p ? $p->{ver} : -1);
}

sub expired
{
	my ($r) = @_;
	return $r->{expired} && $r->{status} ne 'unknown' && !($r->{leased} && $r->{live});
}

sub write_row
{
	my ($s, $id, $r) = @_;
	$sess[$s]{overlay}{$id} = $r;
}

sub fp_text { my ($fp) = @_; return defined $fp ? "\\x0$fp" : '' }

# outcome|status|result|fence|recovery_point|retry hint|its length: every
# in_progress answer has a retry hint (the lease time left or 1 s)
sub claim_answer
{
	my ($outcome, $r) = @_;
	return join '|', $outcome, $r ? ($r->{status}, $r->{result} // '', $r->{fence}, $r->{rp} // '') : ('', '', '', ''),
	  $outcome eq 'in_progress' ? ('t', '*') : ('f', '');
}

# Each model call returns (sqlstate, output) and changes the model; what a
# statement that fails changed is undone by its caller (fail_in_tx, end_tx,
# or the caught shape).
sub m_claim
{
	my ($s, $op) = @_;
	my ($id, $fp, $lease) = @$op{qw(id fp leased)};
	# a leased claim must commit on its own
	return ('25001', '') if $lease && ($sess[$s]{block} || $sess[$s]{subxact});
	my $w = writer_of($s, $id);
	if (defined $w)
	{
		# the other transaction's version of the record counts; one it
		# deleted has none: the key is free if that transaction commits
		my $o = $sess[$w]{overlay}{$id};
		return ('IK001', '') if defined $fp && defined $o->{fp} && $o->{fp} ne $fp;
		return ('00000', claim_answer('in_progress', undef));
	}
	my $r = visible($s, $id);
	my $new = sub {
		my ($fence, $fpv, $rp, $result) = @_;
		return ('40001', '') if snap_changed($s, $id);
		my $n = { status => 'in_progress', fp => $fpv, result => $result, rp => $rp, fence => $fence,
			leased => $lease ? 1 : 0, live => $lease ? 1 : 0, expired => 0, utick => ++$tick };
		write_row($s, $id, $n);
		$sess[$s]{held}{$id} = { fence => $fence, finished => 0 } unless $lease;
		$sess[$s]{fences}{$id} = $fence;
		return ('00000', claim_answer('claimed', $n));
	};
	return $new->(1, $fp, undef, undef) unless $r;
	my $h = $sess[$s]{held}{$id};
	if ($h && !$h->{finished})
	{
		return ('IK001', '') if defined $fp && defined $r->{fp} && $r->{fp} ne $fp;
		return ('00000', claim_answer('in_progress', $r));
	}
	return $new->($r->{fence} + 1, $fp, undef, undef) if expired($r);
	return ('IK001', '') if defined $fp && defined $r->{fp} && $r->{fp} ne $fp;
	return ('00000', claim_answer('replay', $r)) if $r->{status} eq 'succeeded' || $r->{status} eq 'failed';
	return ('00000', claim_answer('in_progress', $r)) if $r->{status} eq 'unknown';
	return ('00000', claim_answer('in_progress', $r)) if $r->{leased} && $r->{live};
	# takeover: the fingerprint stays (or is set), the recovery point and
	# the last retryable error stay
	return $new->($r->{fence} + 1, $r->{fp} // $fp, $r->{rp}, $r->{result});
}

# The fence a write must carry (README "Writes after a claim"), or an error
sub required_fence
{
	my ($s, $id, $fence) = @_;
	my $h = $sess[$s]{held}{$id};
	if ($h)
	{
		return ('IK002') if $h->{finished};
		return ('IK003') if defined $fence && $fence != $h->{fence};
		return (undef, $h->{fence}, $h);
	}
	return (undef, $fence, undef) if defined $fence;
	my $r = visible($s, $id);
	return ('IK003')
	  if $r && ($r->{status} eq 'unknown' || ($r->{status} eq 'in_progress' && $r->{leased}));
	return ('IK002');
}

sub refusal
{
	my ($s, $id, $fence) = @_;
	my $r = visible($s, $id);
	return 'IK002' if !$r;
	return 'IK003' if $r->{fence} != $fence;
	return 'IK002';
}

# finish, fail, mark_unknown, checkpoint, extend_lease
sub m_write
{
	my ($s, $op) = @_;
	my ($kind, $id) = @$op{qw(kind id)};
	my ($err, $fence, $held) = required_fence($s, $id, $op->{fence_value});
	return ($err, '') if $err;
	my $r = visible($s, $id);
	my $open = $r && $r->{fence} == $fence
	  && ($r->{status} eq 'in_progress' || ($r->{status} eq 'unknown' && $kind =~ /^(finish|fail|mark_unknown)$/));
	$open = 0 if $open && $kind eq 'extend_lease' && !$r->{leased};
	return (refusal($s, $id, $fence), '') unless $open;
	return ('40001', '') if snap_changed($s, $id);
	my $n = deep($r);
	if ($kind eq 'finish')          { @$n{qw(status result leased live)} = ('succeeded', $op->{value}, 0, 0) }
	elsif ($kind eq 'mark_unknown') { @$n{qw(status result leased live)} = ('unknown', $op->{value}, 0, 0) }
	elsif ($kind eq 'fail' && !$op->{retryable}) { @$n{qw(status result leased live)} = ('failed', $op->{value}, 0, 0) }
	elsif ($kind eq 'fail')         { @$n{qw(status result leased live)} = ('in_progress', $op->{value}, 1, 0) }
	elsif ($kind eq 'checkpoint')   { $n->{rp} = $op->{value} }
	elsif ($kind eq 'extend_lease') { $n->{live} = 1 }
	# an outcome keeps the record for at least its ttl from now, also after
	# it expired (a late write)
	$n->{expired} = 0 if $n->{status} ne 'in_progress';
	$n->{utick} = ++$tick;
	write_row($s, $id, $n);
	$held->{finished} = 1 if $held && $kind =~ /^(finish|fail|mark_unknown)$/;
	return ('00000', $kind eq 'extend_lease' ? '~3600' : '');
}

sub m_lookup
{
	my ($s, $op) = @_;
	my $r = visible($s, $op->{id});
	return ('00000', '') if !$r || expired($r);
	return ('00000', join '|', $r->{status}, fp_text($r->{fp}), $r->{result} // '', $r->{rp} // '',
		$r->{fence}, $r->{leased} ? 't' : 'f', '*', '*', '*', $r->{leased} ? '*' : '', '*');
}

sub m_once
{
	my ($s, $op) = @_;
	my $id = $op->{id};
	my $r = visible($s, $id);
	return ('00000', 'f') if $r && !expired($r);
	return ('40001', '') if snap_changed($s, $id);
	write_row($s, $id, { status => 'succeeded', fp => undef, result => undef, rp => undef,
		fence => $r ? $r->{fence} + 1 : 1, leased => 0, live => 0, expired => 0, utick => ++$tick });
	return ('00000', 't');
}

# The expired records purge visits.  Purge visits them by the minute of
# expires_at, in the order of the heap within a minute, which the model
# does not know, so every batch is at least as large as the number of
# records here (see batch): which records go does not depend on the order;
# the sort only makes the walk repeatable.  (sql/expiry_bucket.sql checks
# the order and the bound of batches.)
sub m_purge
{
	my ($s, $op) = @_;
	my @c = sort { visible($s, $a)->{exp_key} <=> visible($s, $b)->{exp_key} }
	  grep { my $r = visible($s, $_); $r && expired($r) } 0 .. $#ids;
	my $n = 0;
	for my $id (@c)
	{
		last if $n >= $op->{batch};
		return ('40001', '') if snap_changed($s, $id);
		next if defined writer_of($s, $id);    # SKIP LOCKED
		write_row($s, $id, { deleted => 1 });
		$n++;
	}
	return ('00000', $n);
}

# a claim that records its outcome in the same statement when it got the key
sub m_claim_finish
{
	my ($s, $op) = @_;
	my ($state, $out) = m_claim($s, $op);
	return ($state, '') if $state ne '00000';
	my ($outcome, $fence) = (split /\|/, $out, -1)[ 0, 3 ];
	($state) = m_write($s, { %$op, kind => 'finish', fence_value => $fence }) if $outcome eq 'claimed';
	return ($state, '') if $state ne '00000';
	return ('00000', "$outcome|$fence|");
}

# The session's own UPDATE (touch) or DELETE (drop_row) of the record, a
# statement of its own: between a claim and its outcome it leaves the
# claim's row address stale, and a DELETE lets the key be claimed again in
# the same transaction
sub m_row_change
{
	my ($s, $op) = @_;
	my $r = visible($s, $op->{id});
	return ('00000', '') unless $r;
	return ('40001', '') if snap_changed($s, $op->{id});
	if ($op->{kind} eq 'drop_row')
	{
		write_row($s, $op->{id}, { deleted => 1 });
		return ('00000', 'deleted');
	}
	write_row($s, $op->{id}, { %{ deep($r) }, rp => "u$op->{n}" });
	return ('00000', 'updated');
}

sub base_call
{
	my ($s, $op) = @_;
	my $k = $op->{kind};
	return $k eq 'claim' ? m_claim($s, $op)
	  : $k =~ /^(touch|drop_row)$/ ? m_row_change($s, $op)
	  : $k eq 'claim_finish' ? m_claim_finish($s, $op)
	  : $k eq 'lookup'       ? m_lookup($s, $op)
	  : $k eq 'once'         ? m_once($s, $op)
	  : $k eq 'purge'        ? m_purge($s, $op)
	  :                        m_write($s, $op);
}

# One statement that makes the call in its shape (op_sql)
sub model_call
{
	my ($s, $op, $autocommit) = @_;
	my $w = $op->{wrap};
	my $x = $sess[$s];
	if ($w eq 'deferred' && !$autocommit)
	{
		push @{ $x->{deferred} }, deep($op);
		return ('00000', '');
	}
	if ($w eq 'del')
	{
		# the call finds the record gone
		my $r = visible($s, $op->{id});
		return ('00000', '') unless $r;
		return ('40001', '') if snap_changed($s, $op->{id});
		write_row($s, $op->{id}, { deleted => 1 });
		return base_call($s, $op);
	}
	if ($w eq 'upd' || $w eq 'cte')
	{
		# the call sees the record as the UPDATE left it
		my $r = visible($s, $op->{id});
		return ('00000', '') unless $r;
		return ('40001', '') if snap_changed($s, $op->{id});
		write_row($s, $op->{id}, { %{ deep($r) }, rp => "u$op->{n}" });
		return base_call($s, $op);
	}
	if ($w eq 'then_upd' || $w eq 'where')
	{
		# The call runs first (then_upd, and a purge, which does not take
		# the record's key: a one-time filter, also when there is no record;
		# where: a filter on the record found), then the UPDATE or DELETE,
		# with the statement's snapshot, finds the version from before the
		# call: 27000 if the call changed it.
		my $r = visible($s, $op->{id});
		return ('00000', '') if !$r && $w eq 'where' && $op->{kind} ne 'purge';
		my $before = $x->{overlay}{ $op->{id} };
		my ($state, $out) = base_call($s, $op);
		return ($state, $out) if $state ne '00000';
		return ('00000', '') unless $r;
		my $after = $x->{overlay}{ $op->{id} };
		return ('27000', '') if defined $after && (!defined $before || $after != $before);
		return ('40001', '') if snap_changed($s, $op->{id});
		if ($w eq 'where' && $op->{pick} % 2)
		{
			write_row($s, $op->{id}, { deleted => 1 });
			return ('00000', $r->{rp} // '');
		}
		write_row($s, $op->{id}, { %{ deep($r) }, rp => "u$op->{n}" });
		return ('00000', $w eq 'where' ? "u$op->{n}" : $out);
	}
	if ($w eq 'caught')
	{
		my ($overlay, $held) = (deep($x->{overlay}), deep($x->{held}));
		local $x->{subxact} = 1;
		my ($state, $out) = base_call($s, $op);
		return ('00000', $out) if $state eq '00000';
		@$x{qw(overlay held)} = ($overlay, $held);
		return ('00000', "caught $state");
	}
	my ($state, $out) = base_call($s, $op);
	# RETURNING is computed before the AFTER (or deferred) trigger runs the call
	$out = '' if $w eq 'after' || $w eq 'deferred';
	return ($state, $out);
}

# COMMIT: the calls deferred to it (constraint triggers), the commit guard;
# then the transaction's writes are committed, or none
sub commit_state
{
	my ($s) = @_;
	my $x = $sess[$s];
	for my $op (@{ $x->{deferred} })
	{
		my ($state) = base_call($s, $op);
		return $state if $state ne '00000';
	}
	return 'IK004' if grep { !$_->{finished} } values %{ $x->{held} };
	commit_overlay($s);
	return '00000';
}

sub commit_overlay
{
	my ($s) = @_;
	while (my ($id, $r) = each %{ $sess[$s]{overlay} })
	{
		if ($r->{deleted}) { delete $committed{$id} }
		else               { $committed{$id} = { %{ deep($r) }, ver => ++$version } }
	}
	end_tx($s);
}

sub end_tx
{
	my ($s) = @_;
	@{ $sess[$s] }{qw(in_tx block aborted overlay held sp iso snap deferred)} = (0, 0, 0, {}, {}, [], 'rc', undef, []);
}

# An error in a transaction block: the innermost savepoint's work is undone
# (or the whole transaction's) and the block waits for ROLLBACK [TO]
sub fail_in_tx
{
	my ($s) = @_;
	my $x = $sess[$s];
	if (@{ $x->{sp} })
	{
		my $top = $x->{sp}[-1];
		$x->{$_} = deep($top->{$_}) for qw(overlay held deferred);
	}
	else
	{
		@$x{qw(overlay held deferred)} = ({}, {}, []);
	}
	$x->{aborted} = 1;
}

# Run one step in the model; returns the expected (sqlstate, output).
sub model_step
{
	my ($op) = @_;
	my $s = $op->{s};
	my $x = $s >= 0 ? $sess[$s] : undef;
	my $k = $op->{kind};
	if ($k eq 'begin') { @$x{qw(in_tx block iso)} = (1, 1, $op->{iso}); return ('00000', '') }
	if ($k eq 'commit' || $k eq 'prepare')
	{
		# PREPARE TRANSACTION, then COMMIT PREPARED: where the PREPARE
		# failed or rolled back, the COMMIT PREPARED finds nothing (42704)
		my $state = $x->{aborted} ? 'rolled back' : commit_state($s);
		end_tx($s);
		return ('42704', '') if $k eq 'prepare' && $state ne '00000';
		return ($state eq 'rolled back' ? '00000' : $state, '');
	}
	if ($k eq 'rollback') { end_tx($s); return ('00000', '') }
	if ($k eq 'savepoint')
	{
		push @{ $x->{sp} }, { name => $op->{name}, map { $_ => deep($x->{$_}) } qw(overlay held deferred) };
		return ('00000', '');
	}
	if ($k eq 'rollback_to' || $k eq 'release')
	{
		my ($i) = grep { $x->{sp}[$_]{name} eq $op->{name} } reverse 0 .. $#{ $x->{sp} };
		if ($k eq 'rollback_to')
		{
			splice @{ $x->{sp} }, $i + 1;
			$x->{$_} = deep($x->{sp}[$i]{$_}) for qw(overlay held deferred);
			$x->{aborted} = 0;
		}
		else { splice @{ $x->{sp} }, $i }
		return ('00000', '');
	}
	if ($k eq 'expire_lease')
	{
		my $r = $committed{ $op->{id} };
		$r->{live} = 0, $r->{ver} = ++$version if $r && $r->{leased};
		return ('00000', '');
	}
	if ($k eq 'expire_record')
	{
		# as if claimed two days and last written one day before its last
		# write, with a ttl of a day: expired by the time of that write (its
		# expires_at, a day before it, orders purge)
		my $r = $committed{ $op->{id} };
		@$r{qw(expired exp_key ver)} = (1, $r->{utick}, ++$version) if $r;
		return ('00000', '');
	}

	# calls: in autocommit a transaction of their own; in a transaction
	# block under REPEATABLE READ the first one takes the snapshot
	my $autocommit = !$x->{in_tx};
	$x->{in_tx} = 1 if $autocommit;
	$x->{snap} //= deep(\%committed) if !$autocommit && $x->{iso} ne 'rc';
	my ($state, $out) = model_call($s, $op, $autocommit);
	if ($autocommit)
	{
		if ($state ne '00000') { end_tx($s) }
		elsif (grep { !$_->{finished} } values %{ $x->{held} }) { end_tx($s); ($state, $out) = ('IK004', '') }
		else { commit_overlay($s) }
	}
	elsif ($state ne '00000') { fail_in_tx($s) }
	$out = '' if $state ne '00000';
	return ($state, $out);
}

###############################################################################
# Steps: what they are, when they are possible, their SQL
###############################################################################
my %write_kind = map { $_ => 1 } qw(finish fail mark_unknown checkpoint extend_lease);
my %call_kind = map { $_ => 1 } (keys %write_kind, qw(claim claim_finish lookup once purge));
my %row_change_kind = map { $_ => 1 } qw(touch drop_row);

# May $op run now without waiting for another session?  Fills in what the
# current model state decides (fence values, savepoint names, leases).
sub resolve
{
	my ($op) = @_;
	my $s = $op->{s};
	my $k = $op->{kind};
	if ($s < 0)    # the control connection writes rows outside any session
	{
		return !grep { $_->{in_tx} && exists $_->{overlay}{ $op->{id} } } @sess;
	}
	my $x = $sess[$s];
	if ($k eq 'rollback_to' || $k eq 'release')
	{
		return 0 unless $x->{in_tx} && @{ $x->{sp} };
		return 0 if $k eq 'release' && $x->{aborted};
		$op->{name} //= $x->{sp}[ $op->{pick} % @{ $x->{sp} } ]{name};
		return scalar grep { $_->{name} eq $op->{name} } @{ $x->{sp} };
	}
	return $k =~ /^(rollback|commit|prepare)$/ if $x->{aborted};
	if ($k eq 'begin')
	{
		# SERIALIZABLE in one session only: with one serializable
		# transaction at a time there is no serialization anomaly to predict
		$op->{iso} = 'rr' if $op->{iso} eq 'sr' && $s != 0;
		return !$x->{in_tx};
	}
	return $x->{in_tx} if $k eq 'rollback' || $k eq 'savepoint';
	if ($k eq 'commit' || $k eq 'prepare')
	{
		# the calls deferred to COMMIT must not wait for another session
		return 0 if grep {
			defined writer_of($s, $_->{id})
			  && ($_->{kind} !~ /claim/ || ($_->{wait} && !$_->{forced_nowait}))
			  && $_->{kind} !~ /lookup|purge/
		} @{ $x->{deferred} };
		return $x->{in_tx};
	}
	# the session's UPDATE or DELETE would wait for another writer of the row
	return !defined writer_of($s, $op->{id}) if $row_change_kind{$k};
	die "unknown step $k" unless $call_kind{$k};
	my $w = writer_of($s, $op->{id});
	# an UPDATE of the record, or idem_once, would wait for the other writer
	return 0 if defined $w && ($op->{wrap} =~ /upd|cte|del|where/ || $k eq 'once');
	return 1 if $k eq 'purge';
	if ($k eq 'claim' || $k eq 'claim_finish')
	{
		# a leased claim in a transaction block or a subtransaction is
		# refused (25001): keep one in ten, make the others in-transaction
		$op->{leased} = $op->{lease} && !(($x->{in_tx} || $op->{wrap} eq 'caught') && $op->{pick} % 10) ? 1 : 0;
		# next to another session's uncommitted write, only wait => false
		$op->{forced_nowait} = defined $w ? 1 : 0;
		$stats{'claims next to an uncommitted write'}++ if defined $w && $counting;
		return 1;
	}
	return 1 unless $write_kind{$k};
	return 0 if defined $w;
	# mostly a key this session claimed (drawn with the step)
	if ($op->{own_key})
	{
		my @mine = sort keys %{ $x->{fences} };
		$op->{id} = $mine[ $op->{pick} % @mine ] if @mine;
		return 0 if defined writer_of($s, $op->{id});
	}
	# fences: the one this session's claim returned, the record's current
	# one (a reconciler reading idem_pending, or the fence column of the
	# record's own UPDATE), one older, one newer, none
	my $r = visible($s, $op->{id});
	my $cur = $r ? $r->{fence} : 1;
	my %f = (none => undef, mine => $x->{fences}{ $op->{id} }, current => $cur,
		stale => $cur - 1, future => $cur + 1);
	$op->{fence_value} = $f{ $op->{fence} };
	return 1;
}

# The call of $op as (FROM item or undef, column expressions); $k, $sc and
# $f are the SQL of its key, scope and fence (undef: none)
sub call_parts
{
	my ($op, $k, $sc, $f) = @_;
	my $kind = $op->{kind};
	my $fence = defined $f ? ", fence => $f" : '';
	if ($kind eq 'claim' || $kind eq 'claim_finish')
	{
		my $args = "$k, scope => $sc";
		$args .= ", fingerprint => '\\x0$op->{fp}'" if defined $op->{fp};
		$args .= ', wait => false' unless $op->{wait} && !$op->{forced_nowait};
		$args .= ", lease => '1 hour'" if $op->{leased};
		return ("idem_claim($args) c", 'c.outcome', 'c.fence',
			"CASE WHEN c.outcome = 'claimed' THEN idem_finish($k, '$op->{value}', scope => $sc, fence => c.fence) END")
		  if $kind eq 'claim_finish';
		return ("idem_claim($args) c", qw(c.outcome c.status c.result c.fence c.recovery_point),
			'c.retry_after IS NOT NULL', 'rel_i(c.retry_after)');
	}
	return ("idem_lookup($k, $sc) l", qw(l.status l.fingerprint l.result l.recovery_point l.fence),
		'l.locked_until IS NOT NULL', map({ "rel_t(l.$_)" } qw(created_at updated_at expires_at locked_until)),
		'l.created_at = l.updated_at')
	  if $kind eq 'lookup';
	return (undef, "idem_once($k, $sc)") if $kind eq 'once';
	return (undef, "idem_purge($op->{batch})") if $kind eq 'purge';
	return (undef, "idem_finish($k, '$op->{value}', scope => $sc$fence)") if $kind eq 'finish';
	return (undef, "idem_fail($k, '$op->{value}', retryable => " . ($op->{retryable} ? 'true' : 'false') . ", scope => $sc$fence)")
	  if $kind eq 'fail';
	return (undef, "idem_mark_unknown($k, '$op->{value}', scope => $sc$fence)") if $kind eq 'mark_unknown';
	return (undef, "idem_checkpoint($k, '$op->{value}', scope => $sc$fence)") if $kind eq 'checkpoint';
	return (undef, "rel_t(idem_extend_lease($k, '1 hour', scope => $sc$fence))") if $kind eq 'extend_lease';
	die "unknown call $kind";
}

# as a query of its own, and as one whose one row is one text
sub plain_query
{
	my ($from, @cols) = @_;
	return 'SELECT ' . join(', ', @cols) . (defined $from ? " FROM $from" : '');
}

sub text_query
{
	my ($from, @cols) = @_;
	return "SELECT format('" . join('|', ('%s') x @cols) . "', " . join(', ', @cols) . ')'
	  . (defined $from ? " FROM $from" : '');
}

sub op_sql
{
	my ($op) = @_;
	my $k = $op->{kind};
	return $op->{iso} eq 'rr' ? 'BEGIN ISOLATION LEVEL REPEATABLE READ'
	  : $op->{iso} eq 'sr' ? 'BEGIN ISOLATION LEVEL SERIALIZABLE'
	  : 'BEGIN'
	  if $k eq 'begin';
	return 'COMMIT' if $k eq 'commit';
	# transaction identifiers are the cluster's: each database its own
	return "\\set gid g$op->{n}_ :db\nPREPARE TRANSACTION :'gid'; COMMIT PREPARED :'gid'" if $k eq 'prepare';
	return 'ROLLBACK' if $k eq 'rollback';
	return "SAVEPOINT $op->{name}" if $k eq 'savepoint';
	return "ROLLBACK TO SAVEPOINT $op->{name}" if $k eq 'rollback_to';
	return "RELEASE SAVEPOINT $op->{name}" if $k eq 'release';
	my ($scope, $key) = @{ $ids[ $op->{id} ] };
	my $where = "scope = '$scope' AND key = '$key'";
	return "UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 minute' WHERE $where AND locked_until IS NOT NULL"
	  if $k eq 'expire_lease';
	# (a record expired so and not written since, expires_at = updated_at,
	# stays as it is: the model's order of purge is that of the last writes;
	# hours, not days: a day in the session's TimeZone can last 23 or 25
	# hours, and its retention, updated_at + (expires_at - created_at),
	# would end an hour after the last write)
	return "UPDATE idempotent_record SET"
	  . " created_at = CASE WHEN expires_at = updated_at THEN created_at ELSE updated_at - interval '48 hours' END,"
	  . " expires_at = CASE WHEN expires_at = updated_at THEN expires_at ELSE updated_at - interval '24 hours' END,"
	  . " updated_at = CASE WHEN expires_at = updated_at THEN updated_at ELSE updated_at - interval '24 hours' END"
	  . " WHERE $where"
	  if $k eq 'expire_record';
	my $w = $op->{wrap};
	my $set = "SET recovery_point = 'u$op->{n}'";
	return "UPDATE idempotent_record $set WHERE $where RETURNING 'updated'" if $k eq 'touch';
	return "DELETE FROM idempotent_record WHERE $where RETURNING 'deleted'" if $k eq 'drop_row';
	if ($w eq 'upd' || $w eq 'cte' || $w eq 'del' || $w eq 'where')
	{
		# the call takes key, scope (and fence) from the updated (deleted) row
		my $t = $w eq 'cte' ? 'u' : 'r';
		my $f = ($op->{fence} // '') eq 'current' ? "$t.fence" : $op->{fence_value};
		my $call = '(' . text_query(call_parts($op, "$t.key", "$t.scope", $f)) . ')';
		return "UPDATE idempotent_record r $set WHERE r.scope = '$scope' AND r.key = '$key' RETURNING $call"
		  if $w eq 'upd';
		return "DELETE FROM idempotent_record r WHERE r.scope = '$scope' AND r.key = '$key' RETURNING $call"
		  if $w eq 'del';
		my $filter = "r.scope = '$scope' AND r.key = '$key' AND $call IS DISTINCT FROM 'never'";
		return ($op->{pick} % 2 ? "DELETE FROM idempotent_record r" : "UPDATE idempotent_record r $set")
		  . " WHERE $filter RETURNING r.recovery_point"
		  if $w eq 'where';
		return "WITH u AS (UPDATE idempotent_record $set WHERE $where RETURNING scope, key, fence) SELECT $call FROM u";
	}
	my @call = call_parts($op, "'$key'", "'$scope'", $op->{fence_value});
	return plain_query(@call) if $w eq 'plain';
	my $q = text_query(@call);
	return "SELECT try_call(\$c\$$q\$c\$)" if $w eq 'caught';
	return "INSERT INTO biz_call (step, timing, call) VALUES ($op->{n}, '$w', \$c\$$q\$c\$) RETURNING answer"
	  if $w eq 'before' || $w eq 'after' || $w eq 'deferred';
	return "INSERT INTO biz_call (step, timing, answer) SELECT $op->{n}, 'select', ($q) RETURNING answer"
	  if $w eq 'select';
	return "WITH c AS MATERIALIZED (SELECT ($q) AS answer) UPDATE idempotent_record $set WHERE $where"
	  . " AND (SELECT true FROM c) RETURNING (SELECT answer FROM c)"
	  if $w eq 'then_upd';
	die "unknown shape $w";
}

sub op_text
{
	my ($op) = @_;
	my $who = $op->{s} < 0 ? 'ctl' : "s$op->{s}";
	return "$who: " . op_sql($op);
}

# A random step (its preconditions are checked by resolve)
my @weights = (claim => 26, claim_finish => 3, finish => 10, fail => 9, mark_unknown => 3,
	checkpoint => 5, extend_lease => 3, lookup => 5, once => 3, purge => 3, begin => 9,
	commit => 8, prepare => 1, rollback => 3, savepoint => 6, rollback_to => 6, release => 3,
	expire_lease => 5, expire_record => 3, touch => 4, drop_row => 2);
# statement shapes of a call: plain SELECT, error caught in PL/pgSQL, BEFORE
# or AFTER trigger or one deferred to COMMIT, INSERT ... SELECT, RETURNING of
# an UPDATE or a DELETE of the record, after a writable CTE that updated it,
# before an UPDATE of it, in the WHERE clause of an UPDATE or DELETE of it
my @wraps = (plain => 50, caught => 8, before => 6, after => 6, deferred => 5, select => 4,
	upd => 7, del => 3, cte => 6, then_upd => 4, where => 4);

sub pick_weighted
{
	my ($w) = @_;
	my $sum = 0;
	$sum += $w->[ 2 * $_ + 1 ] for 0 .. @$w / 2 - 1;
	my $r = rand($sum);
	for (my $i = 0; $i < @$w; $i += 2)
	{
		return $w->[$i] if ($r -= $w->[ $i + 1 ]) < 0;
	}
	return $w->[-2];
}

sub random_op
{
	my ($n) = @_;
	my $kind = pick_weighted(\@weights);
	my $op = { n => $n, kind => $kind, s => int(rand($n_sessions)) };
	$op->{s} = -1 if $kind =~ /^expire_/;
	$op->{id} = int(rand(@ids));
	my $f = int(rand(5));
	$op->{fp} = $f >= 3 ? undef : $f == 2 ? 2 : 1;
	$op->{wait} = rand() < 0.7 ? 1 : 0;
	$op->{lease} = rand() < 0.4 ? 1 : 0;
	my @f = qw(none mine mine mine current current stale future);
	$op->{fence} = $f[ int(rand(@f)) ];
	$op->{value} = $kind eq 'checkpoint' ? "p$n" : "{\"n\": $n}";
	$op->{retryable} = rand() < 0.5 ? 1 : 0;
	$op->{own_key} = rand() < 0.7 ? 1 : 0;
	# never fewer than the records (@ids): see m_purge
	$op->{batch} = (scalar(@ids), scalar(@ids) + 1, 100)[ int(rand(3)) ];
	$op->{iso} = (qw(rc rc rc rr sr))[ int(rand(5)) ];
	$op->{name} = "sp$n" if $kind eq 'savepoint';
	$op->{pick} = int(rand(100));
	$op->{wrap} = pick_weighted(\@wraps);
	$op->{wrap} = 'plain' unless $call_kind{$kind};
	return $op;
}

###############################################################################
# Running steps against the databases and the model
###############################################################################
# one set of sessions per database, each with its path setting
my @conn;
for my $d (0 .. $#dbs)
{
	my @setting = split /\+/, $paths[$d];
	@setting = ($setting[0]) x $n_sessions if @setting == 1;
	die "IDEM_MODEL_PATHS: $paths[$d] does not name one setting or $n_sessions" unless @setting == $n_sessions;
	$conn[$d] = [ map { Session->new($node, $dbs[$d], $_) } @setting ];
}
my @ctl = map { Session->new($node, $_, undef) } @dbs;

# the same SQL in the same session of every database, at once
sub run_everywhere
{
	my ($sessions, $sql) = @_;
	$_->send($sql) for @$sessions;
	return map { [ $_->recv ] } @$sessions;
}

# record rows (the first ten columns are the model's), then business rows;
# the expiry column is record_kept_until of src/idempotency.h (as in
# sql/include/kept_until.sql, without its overflow branch, which these
# times never reach): change them together
my $state_sql = q{SELECT line FROM (
  SELECT 1, scope, key, 0, format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s',
         scope, key, status, fingerprint, result, recovery_point, fence,
         locked_until IS NOT NULL, coalesce(locked_until > clock_timestamp(), false),
         CASE WHEN status NOT IN ('succeeded', 'failed') THEN expires_at
              ELSE greatest(expires_at, timezone('UTC', timezone('UTC', updated_at) + (expires_at - created_at))) END
           <= clock_timestamp(),
         rel_t(created_at), rel_t(updated_at), rel_t(expires_at), rel_t(locked_until),
         created_at = updated_at)
    FROM idempotent_record
  UNION ALL
  SELECT 2, '', '', step, format('biz|%s|%s|%s', step, timing, answer) FROM biz_call
) t (part, scope, key, step, line) ORDER BY part, scope, key, step};

sub model_state
{
	my @rows;
	for my $id (sort { $ids[$a][0] cmp $ids[$b][0] || $ids[$a][1] cmp $ids[$b][1] } keys %committed)
	{
		my $r = $committed{$id};
		push @rows, join '|', @{ $ids[$id] }, $r->{status}, fp_text($r->{fp}), $r->{result} // '',
		  $r->{rp} // '', $r->{fence}, $r->{leased} ? 't' : 'f', ($r->{leased} && $r->{live}) ? 't' : 'f',
		  $r->{expired} ? 't' : 'f';
	}
	return join "\n", @rows;
}

# the record rows of a table listing as the model knows them
sub model_view
{
	my ($table) = @_;
	return join "\n", map { join '|', (split /\|/, $_, -1)[ 0 .. 9 ] } grep { !/^biz\|/ } split /\n/, $table;
}

# Times ("~seconds" from the clock of the reading) may differ by how far
# apart the databases ran the steps that set them: a few times the slowest
# step so far.
my $slowest = 0;
sub tolerance { return 0.5 + 4 * $slowest }

# Does $got answer as $want?  Field by field; "*" in $want matches anything.
sub same
{
	my ($want, $got) = @_;
	my @wl = split /\n/, $want, -1;
	my @gl = split /\n/, $got, -1;
	return 0 unless @wl == @gl;
	for my $i (0 .. $#wl)
	{
		my @wf = split /\|/, $wl[$i], -1;
		my @gf = split /\|/, $gl[$i], -1;
		return 0 unless @wf == @gf;
		for my $j (0 .. $#wf)
		{
			next if $wf[$j] eq $gf[$j] || $wf[$j] eq '*';
			return 0 unless $wf[$j] =~ /^~(-?[\d.]+)$/;
			my $w = $1;
			return 0 unless $gf[$j] =~ /^~(-?[\d.]+)$/ && abs($w - $1) <= tolerance();
		}
	}
	return 1;
}

sub show
{
	my ($d, $answer) = @_;
	my ($state, $out, $messages) = @$answer;
	my $text = "  $dbs[$d] ($paths[$d]): $state" . ($out eq '' ? '' : "\n" . ($out =~ s/^/    /mgr));
	$text .= "\n" . ($messages =~ s/^/    /mgr) if $messages ne '';
	return $text;
}

sub fresh_start
{
	for my $sessions (@conn) { $_->q('ROLLBACK') for @$sessions }
	run_everywhere(\@ctl, 'TRUNCATE idempotent_record, biz_call');
	reset_model();
}

# Run the steps of @$ops (skipping those not possible at their turn);
# returns undef, or (what diverged: "paths" or "model", its description,
# how many steps it took).
sub run_ops
{
	my ($ops, $count, $limit) = @_;
	fresh_start();
	my ($i, $done) = (0, 0);
	for my $op (@$ops)
	{
		last if $limit && $done >= $limit;
		$i++;
		next unless resolve($op);
		$done++;
		my $sessions = [ map { $op->{s} < 0 ? $ctl[$_] : $conn[$_][ $op->{s} ] } 0 .. $#dbs ];
		my $started = time();
		my @got = eval { run_everywhere($sessions, op_sql($op)) };
		return ('paths', "step $i blocked or psql died: " . op_text($op) . "\n$@", $i) if $@;
		$slowest = time() - $started if time() - $started > $slowest;
		# only a commit changes what the tables hold
		my $commits = $op->{s} < 0 || $op->{kind} =~ /^(commit|prepare)$/
		  || ($op->{kind} ne 'begin' && !$sess[ $op->{s} ]{in_tx});
		my ($want_state, $want) = model_step($op);
		if ($count)
		{
			$stats{steps}++;
			$stats{ $op->{kind} }++;
			$stats{"shape $op->{wrap}"}++ if $call_kind{ $op->{kind} } && $op->{wrap} ne 'plain';
			$stats{"BEGIN $op->{iso}"}++ if $op->{kind} eq 'begin';
			$stats{"answer $got[0][0]"}++ if $got[0][0] ne '00000';
			$stats{ 'outcome ' . (split /\|/, $got[0][1])[0] }++
			  if $op->{kind} eq 'claim' && $op->{wrap} eq 'plain' && $got[0][0] eq '00000';
		}
		for my $d (1 .. $#dbs)
		{
			next if $got[$d][0] eq $got[0][0] && $got[$d][2] eq $got[0][2] && same($got[0][1], $got[$d][1]);
			return ('paths', "step $i: " . op_text($op) . "\n" . show(0, $got[0]) . "\n" . show($d, $got[$d]), $i);
		}
		if ($got[0][0] ne $want_state || !same($want, $got[0][1]))
		{
			return ('model', "step $i: " . op_text($op) . "\n  model: $want_state $want\n" . show(0, $got[0]), $i);
		}
		next unless $commits;
		my @tables = map { $_->[1] } run_everywhere(\@ctl, $state_sql);
		for my $d (1 .. $#dbs)
		{
			next if same($tables[0], $tables[$d]);
			return ('paths', "after step $i: " . op_text($op) . "\n  $dbs[0] ($paths[0]) tables:\n$tables[0]\n"
				  . "  $dbs[$d] ($paths[$d]) tables:\n$tables[$d]", $i);
		}
		my $mine = model_state();
		return ('model', "after step $i: " . op_text($op) . "\n  model table:\n$mine\n  server table:\n"
			  . model_view($tables[0]), $i)
		  if model_view($tables[0]) ne $mine;
	}
	return (undef, undef, $i);
}

# the shortest subsequence of @$ops (up to the divergence) that diverges
# the same way
sub shrink
{
	my ($ops, $what) = @_;
	my $deadline = time() + 120;
	my $chunk = int(@$ops / 2) || 1;
	while ($chunk >= 1 && time() < $deadline)
	{
		my $changed = 0;
		for (my $i = 0; $i < @$ops && time() < $deadline;)
		{
			my @cand = (@$ops[ 0 .. $i - 1 ], @$ops[ $i + $chunk .. $#$ops ]);
			my ($got, undef, $at) = run_ops([ map { deep($_) } @cand ]);
			if (defined $got && $got eq $what) { $ops = [ @cand[ 0 .. $at - 1 ] ]; $changed = 1 }
			else                               { $i += $chunk }
		}
		$chunk = int($chunk / 2) unless $changed;
	}
	return $ops;
}

srand($seed);
# draw more than needed: steps not possible at their turn are skipped
my @ops = map { random_op($_) } 1 .. 3 * $n_ops;
my $start = time();
$counting = 1;
my ($what, $why, $at) = run_ops([ map { deep($_) } @ops ], 1, $n_ops);
$counting = 0;
my $elapsed = time() - $start;
is($why, undef, "the direct path, planned SQL and the model agree on every step (seed $seed)");
if (defined $why)
{
	diag("divergence ($what) with seed $seed:\n$why");
	my $short = shrink([ @ops[ 0 .. $at - 1 ] ], $what);
	my (undef, $why2) = run_ops([ map { deep($_) } @$short ]);
	my @lines;
	reset_model();
	for my $op (map { deep($_) } @$short)
	{
		next unless resolve($op);
		push @lines, op_text($op);
		model_step($op);
	}
	diag("shortest sequence found (" . scalar(@lines) . " steps), seed $seed:\n  "
		  . join("\n  ", @lines) . "\n" . ($why2 // ''));
}
ok(defined $why || $stats{steps} == $n_ops, "$n_ops steps ran");

# Did each database take the path it was meant to?  The store's reads and
# outcome writes run as planned statements (counted by pg_stat_statements)
# only where the direct path does not serve.
for my $d (0 .. $#dbs)
{
	next unless $paths[$d] =~ /^(on|off)$/;
	my $planned = $node->safe_psql($dbs[$d],
		q{SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
		   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		     AND NOT toplevel AND query LIKE '%idempotent_record%'
		     AND (query LIKE 'SELECT status%' OR query LIKE 'UPDATE % SET status = $4%')});
	if ($paths[$d] eq 'on') { is($planned, 0, "$dbs[$d]: no record read or outcome ran as planned SQL") }
	else { cmp_ok($planned, '>', 0, "$dbs[$d]: record reads and outcomes ran as planned SQL ($planned)") }

	# a new key's insert, wait => false too: the planned INSERT runs only
	# after a duplicate met (in this model, one its snapshot cannot see:
	# 40001, which pg_stat_statements does not count)
	my $inserts = $node->safe_psql($dbs[$d],
		q{SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
		   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		     AND NOT toplevel AND query LIKE 'INSERT INTO %idempotent_record (scope, key, status, %'});
	if ($paths[$d] eq 'on') { is($inserts, 0, "$dbs[$d]: no claim's insert ran as planned SQL") }
	else { cmp_ok($inserts, '>', 0, "$dbs[$d]: claims' inserts ran as planned SQL ($inserts)") }
}
diag(sprintf("model figures: seed %d, steps %d, %.1f s, slowest step %.3f s; %s",
	$seed, $stats{steps} // 0, $elapsed, $slowest,
	join(', ', map { "$_ $stats{$_}" } grep { $_ ne 'steps' } sort keys %stats)));

$_->quit for (map { @$_ } @conn), @ctl;
$node->stop;
done_testing();
