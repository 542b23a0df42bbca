/*-------------------------------------------------------------------------
 *
 * lookonly.c
 *	  Which transactions did nothing but look at zklock's own state, so
 *	  that a lost session-level lock does not stop a DBA from looking at it.
 *
 * A lost session-level lock fails every commit of the backend until it is
 * acknowledged (README, "Lock loss never commits"), read-only ones too.
 * Having no transaction id is not enough to be harmless: a write through
 * postgres_fdw assigns no local transaction id, yet its remote transaction
 * commits with ours, and README promises that a lost lock aborts it.  But
 * the same rule made "SELECT * FROM zk_locks" fail in autocommit, so the
 * DBA could not look at the lost lock without BEGIN ... ROLLBACK.
 *
 * So the exemption is for what can be recognised as harmless: a
 * transaction with no transaction id in which nothing ran but plain
 * SELECTs that call one of zklock's inspection functions (zk_locks,
 * zk_status, zk_lock_queue: they read the backend's table and ZooKeeper,
 * and change nothing).  Two checks, both sticky until the transaction
 * ends:
 *
 * - Every statement's final plan is built only from plan nodes and
 *   expressions known here, calling no function besides the inspections
 *   but built-in non-volatile ones (zko_statement).  A table, a utility
 *   statement, an unknown node counts as work.
 *
 * - Every function the transaction runs, wherever it runs, is one of
 *   those (zko_function_executed, from PostgreSQL's function-execute
 *   object access hook).  A plan does not show everything a transaction
 *   ran: a user function labelled IMMUTABLE is called by the planner and
 *   folded away, a parameter of a domain type runs the domain's CHECK at
 *   Bind before any plan exists, a fast-path call (libpq's PQfn) runs a
 *   function with no statement at all, and a PL/pgSQL simple expression
 *   runs with no executor.  Each of these could NOTIFY or set_config(...,
 *   false), which commit without a transaction id.  PostgreSQL invokes
 *   the hook wherever it prepares a function call for execution (every
 *   expression initialisation, aggregates, set-returning functions, and
 *   the fast-path message), so "what ran" is judged there, not guessed
 *   from plans.  What the hook does not see are functions called directly
 *   from C (a type's input and output functions): they are a superuser's
 *   C code, as is everything else the exemption trusts.
 *
 * Anything else counts as work, and the commit is checked as before.  The
 * classification is not done while the backend holds no zklock lock.
 *
 * src/xact/lookonly.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "fmgr.h"
#include "nodes/nodeFuncs.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "xact/locktable.h"
#include "xact/lookonly.h"

/* zklock's inspection functions (functions.c) */
extern PGDLLEXPORT Datum zk_locks(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_status(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_lock_queue(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_lock_revoked(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock_shared(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock_all(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock_semaphore(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock_array(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum zk_unlock_shared_array(PG_FUNCTION_ARGS);

typedef enum ZkoState
{
	ZKO_NOTHING,				/* no statement yet */
	ZKO_LOOKED,					/* only inspections so far */
	ZKO_WORKED					/* anything else */
} ZkoState;

static ZkoState xact_state = ZKO_NOTHING;

typedef struct LookCheck
{
	bool		saw_inspection;
	bool		release_ok;		/* zklock's unlock functions count as looks */
} LookCheck;

/*
 * Is funcid one of zklock's inspection functions (or, with release_ok,
 * of its unlock functions)?  By its C entry point.
 */
static bool
is_inspection(Oid funcid, bool release_ok)
{
	HeapTuple	tup;
	bool		c_lang;
	FmgrInfo	fi;

	if (funcid < FirstNormalObjectId)
		return false;
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tup))
		return false;
	c_lang = ((Form_pg_proc) GETSTRUCT(tup))->prolang == ClanguageId;
	ReleaseSysCache(tup);
	if (!c_lang)
		return false;
	fmgr_info(funcid, &fi);
	if (fi.fn_addr == zk_locks || fi.fn_addr == zk_status ||
		fi.fn_addr == zk_lock_queue || fi.fn_addr == zk_lock_revoked)
		return true;
	return release_ok &&
		(fi.fn_addr == zk_unlock || fi.fn_addr == zk_unlock_shared ||
		 fi.fn_addr == zk_unlock_all || fi.fn_addr == zk_unlock_semaphore ||
		 fi.fn_addr == zk_unlock_array ||
		 fi.fn_addr == zk_unlock_shared_array);
}

/* check_functions_in_node's checker: true for a function that may act */
static bool
may_act(Oid funcid, void *context)
{
	LookCheck  *c = (LookCheck *) context;

	if (is_inspection(funcid, c->release_ok))
	{
		c->saw_inspection = true;
		return false;
	}
	/* the catalog's own functions are what their volatility says */
	return funcid >= FirstNormalObjectId ||
		func_volatile(funcid) == PROVOLATILE_VOLATILE;
}

/*
 * True if an expression may act: a node type not known to be harmless
 * (a domain's CHECK, nextval of an identity, ...), or a function that may.
 */
static bool
expr_may_act(Node *node, LookCheck *c)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_List:
		case T_TargetEntry:
		case T_RangeTblFunction:
		case T_Var:
		case T_Const:
		case T_Param:
		case T_Aggref:
		case T_FuncExpr:
		case T_OpExpr:
		case T_DistinctExpr:
		case T_NullIfExpr:
		case T_ScalarArrayOpExpr:
		case T_BoolExpr:
		case T_SubPlan:
		case T_FieldSelect:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_CaseExpr:
		case T_CaseWhen:
		case T_CaseTestExpr:
		case T_CoalesceExpr:
		case T_RowExpr:
		case T_NullTest:
		case T_BooleanTest:
			break;
		default:
			return true;
	}
	if (check_functions_in_node(node, may_act, c))
		return true;
	return expression_tree_walker(node, expr_may_act, (void *) c);
}

static bool
operators_may_act(const Oid *ops, int n)
{
	for (int i = 0; i < n; i++)
		if (ops[i] >= FirstNormalObjectId)
			return true;
	return false;
}

/*
 * True if a plan may act: a node type other than those a SELECT of the
 * inspection functions is planned with (which scan no table), or an
 * expression or operator of it that may.
 */
static bool
plan_may_act(Plan *plan, LookCheck *c)
{
	if (plan == NULL)
		return false;
	switch (nodeTag(plan))
	{
		case T_FunctionScan:
			if (expr_may_act((Node *) ((FunctionScan *) plan)->functions, c))
				return true;
			break;
		case T_Result:
			if (expr_may_act(((Result *) plan)->resconstantqual, c))
				return true;
			break;
		case T_ProjectSet:
		case T_SubqueryScan:
			break;
		case T_Agg:
			{
				Agg		   *agg = (Agg *) plan;

				if (agg->groupingSets != NIL || agg->chain != NIL ||
					operators_may_act(agg->grpOperators, agg->numCols))
					return true;
				break;
			}
		case T_Sort:
			if (operators_may_act(((Sort *) plan)->sortOperators,
								  ((Sort *) plan)->numCols))
				return true;
			break;
		case T_Limit:
			{
				Limit	   *limit = (Limit *) plan;

				if (expr_may_act(limit->limitOffset, c) ||
					expr_may_act(limit->limitCount, c) ||
					operators_may_act(limit->uniqOperators,
									  limit->uniqNumCols))
					return true;
				break;
			}
		default:
			return true;
	}
	if (expr_may_act((Node *) plan->targetlist, c) ||
		expr_may_act((Node *) plan->qual, c) ||
		expr_may_act((Node *) plan->initPlan, c))
		return true;
	if (IsA(plan, SubqueryScan) &&
		plan_may_act(((SubqueryScan *) plan)->subplan, c))
		return true;
	return plan_may_act(plan->lefttree, c) || plan_may_act(plan->righttree, c);
}

/* Is the statement a plain SELECT whose plan cannot act (see c)? */
static bool
plan_only_looks(PlannedStmt *stmt, LookCheck *c)
{
	ListCell   *lc;

	if (stmt->commandType != CMD_SELECT || stmt->utilityStmt != NULL ||
		stmt->hasModifyingCTE || stmt->rowMarks != NIL)
		return false;
	if (plan_may_act(stmt->planTree, c))
		return false;
	foreach(lc, stmt->subplans)
		if (plan_may_act((Plan *) lfirst(lc), c))
			return false;
	return true;
}

/* Is the statement a harmless look at zklock's state? */
static bool
is_look(PlannedStmt *stmt)
{
	LookCheck	c = {false, false};

	return plan_only_looks(stmt, &c) && c.saw_inspection;
}

/*
 * May the statement run while a held lock is known lost (failfast.c)?
 * What cannot act under the lock: a plain SELECT that calls nothing but
 * built-in non-volatile functions and zklock's inspection and unlock
 * functions (so that the DBA can look at the loss and acknowledge it).
 * The functions it runs besides are not watched here as zko_function_
 * executed watches them for the commit: a function that does work is
 * either in the plan (and refused here) or runs where no statement starts
 * (a fast-path call), and then the COMMIT fails as before.
 */
bool
zko_may_run_after_loss(PlannedStmt *stmt)
{
	LookCheck	c = {false, true};

	return plan_only_looks(stmt, &c);
}

/*
 * The utility statements that may run while a held lock is known lost:
 * they end the transaction, end a cursor or a prepared statement, or read
 * and change settings (zklock.cancel_on_loss among them), and DISCARD
 * ALL acknowledges every session-level loss.
 */
bool
zko_utility_may_run_after_loss(Node *parsetree)
{
	switch (nodeTag(parsetree))
	{
		case T_TransactionStmt:
		case T_DiscardStmt:
		case T_VariableShowStmt:
		case T_VariableSetStmt:
		case T_DeallocateStmt:
		case T_ClosePortalStmt:
			return true;
		default:
			return false;
	}
}

void
zko_statement(PlannedStmt *stmt)
{
	if (xact_state == ZKO_WORKED)
		return;

	/*
	 * With no lock held, nothing is checked at commit; a lock taken later
	 * in this transaction is taken by a statement that is not a look.
	 */
	if (!zkl_have_locks() || !is_look(stmt))
		xact_state = ZKO_WORKED;
	else
		xact_state = ZKO_LOOKED;
}

void
zko_function_executed(Oid funcid)
{
	LookCheck	c = {false, false};

	/*
	 * Cheap when nothing is checked: once the transaction counts as work,
	 * or while no lock is held, no catalog lookup is made.
	 */
	if (xact_state == ZKO_WORKED)
		return;
	if (!zkl_have_locks() || may_act(funcid, &c))
		xact_state = ZKO_WORKED;
}

void
zko_utility(Node *parsetree)
{
	/* BEGIN, COMMIT, SAVEPOINT ... only frame the statements */
	if (!IsA(parsetree, TransactionStmt))
		xact_state = ZKO_WORKED;
}

bool
zko_only_looked(void)
{
	return xact_state == ZKO_LOOKED &&
		!TransactionIdIsValid(GetTopTransactionIdIfAny());
}

void
zko_xact_end(void)
{
	xact_state = ZKO_NOTHING;
}
